"""JSON read from a byte stream a value at a time, so that a large array is never held or
expanded whole and its reader may stop part way (uws.web.batchbodies stops a batch at
one row past its service's ``max_batch_jobs``).

The caller walks the structure (:meth:`JsonStream.peek`, :meth:`JsonStream.take`) and
decodes each element with :meth:`JsonStream.value` (``json.JSONDecoder.raw_decode``
over the text read so far, reading on while the element is incomplete, up to a length
the caller gives).  Errors are
ValueError, as ``json.loads`` raises them; the encodings ``json.loads`` accepts for
bytes (UTF-8 with or without a BOM, UTF-16, UTF-32) are accepted here too.
"""
from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from typing import Any

CHUNK = 64 << 10            # bytes read at a time while a value is complete
LOOKAHEAD = 8               # a value ending this close to the text read so far may go on
WHITESPACE = re.compile(r"[ \t\n\r]*")   # JSON's own (str.isspace would take more)


class TooLong(Exception):
    """A value longer than its caller allows (not a ValueError: the JSON may be fine)."""

    def __init__(self, most: int):
        super().__init__(f"more than {most} characters")
        self.most = most


class JsonStream:
    """The JSON text of ``read(n)`` (bytes; b"" at the end), consumed from the front."""

    def __init__(self, read: Callable[[int], bytes]):
        self._read = read
        self._decode: Callable[..., str] | None = None   # set from the first bytes
        self._text = ""
        self._pos = 0           # where the unconsumed text starts in _text
        self._dropped = 0       # characters consumed and dropped before _text
        self._ended = False
        self._json = json.JSONDecoder()

    def peek(self) -> str:
        """The next character that is not whitespace ("" at the end), not consumed."""
        while True:
            text = self._text
            pos = self._pos = _after_whitespace(text, self._pos)
            if pos < len(text) or not self._more():
                return text[pos] if pos < len(text) else ""

    def take(self, expected: str, what: str) -> str:
        """Consume the next character, one of ``expected``; ValueError naming ``what``."""
        char = self.peek()
        if not char or char not in expected:
            raise ValueError(f"Expecting {what} (char {self._dropped + self._pos})")
        self._pos += 1
        return char

    def value(self, most: int) -> Any:
        """The next whole JSON value, consumed; TooLong when its text has more than
        ``most`` characters (it is then held no further)."""
        if not self.peek():
            raise ValueError(f"Expecting value (char {self._dropped + self._pos})")
        while True:
            try:
                value, end = self._json.raw_decode(self._text, self._pos)
            except json.JSONDecodeError as exc:
                if not self._truncated(exc):
                    raise ValueError(f"{exc.msg} (char {self._dropped + exc.pos})") from None
                self._within(len(self._text) - self._pos, most)
                # as much again each time: re-decoding a long value stays linear
                self._more(len(self._text) - self._pos)
                continue
            self._within(end - self._pos, most)
            # "12" or "1." at the end of the text read so far may go on ("123", "1.5")
            if len(self._text) - end < LOOKAHEAD and self._more():
                continue
            self._pos = end
            return value

    def _truncated(self, exc: json.JSONDecodeError) -> bool:
        """Whether the error may be the end of the text read so far, not of the value:
        a decoder stuck by that end stops within a few characters of it, except in a
        string (reported where the string starts)."""
        if self._ended:
            return False
        return (exc.pos >= len(self._text) - LOOKAHEAD
                or exc.msg.startswith("Unterminated string"))

    @staticmethod
    def _within(length: int, most: int) -> None:
        if length > most:
            raise TooLong(most)

    def end(self) -> None:
        """Nothing but whitespace may follow (read to the end to know)."""
        if self.peek():
            raise ValueError(f"Extra data (char {self._dropped + self._pos})")

    def _more(self, at_least: int = 0) -> bool:
        """Append at least ``at_least`` more bytes' text (CHUNK if more); False at the end."""
        if self._ended:
            return False
        if self._pos > len(self._text) // 2:    # drop what was consumed, now and then
            self._dropped += self._pos
            self._text, self._pos = self._text[self._pos:], 0
        data = self._read(max(CHUNK, at_least))
        decode = self._decode
        if decode is None:
            data, decode = self._start(data)
        self._ended = not data
        self._text += decode(data, final=self._ended)
        return True

    def _start(self, data: bytes) -> tuple[bytes, Callable[..., str]]:
        """Choose the decoder from the first (up to 4) bytes, as json.loads does."""
        while 0 < len(data) < 4:
            more = self._read(CHUNK)
            if not more:
                break
            data += more
        encoding = json.detect_encoding(data)
        self._decode = codecs.getincrementaldecoder(encoding)("surrogatepass").decode
        return data, self._decode


def _after_whitespace(text: str, pos: int) -> int:
    found = WHITESPACE.match(text, pos)
    return found.end() if found else pos
