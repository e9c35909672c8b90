"""JSON read from a byte stream a value at a time, so that a large array is never held or
expanded whole and its reader may stop part way (uws.web.batchbodies stops a batch at
one row past its service's ``max_batch_jobs``).

The caller walks the structure (:meth:`JsonStream.peek`, :meth:`JsonStream.take`) and
decodes each element with :meth:`JsonStream.value` (``json.JSONDecoder.raw_decode``
over the text read so far, reading on while the element is incomplete).  Errors are
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
WHITESPACE = re.compile(r"[ \t\n\r]*")   # JSON's own (str.isspace would take more)


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

    def value(self) -> Any:
        """The next whole JSON value, consumed."""
        if not self.peek():
            raise ValueError(f"Expecting value (char {self._dropped + self._pos})")
        while True:
            try:
                value, end = self._json.raw_decode(self._text, self._pos)
            except json.JSONDecodeError as exc:
                # incomplete so far, or wrong: only the end of the body tells which;
                # reading as much again each time keeps the re-decoding linear
                if self._more(len(self._text) - self._pos):
                    continue
                raise ValueError(f"{exc.msg} (char {self._dropped + exc.pos})") from None
            # a number at the end of the text read so far may go on in the next bytes
            if end == len(self._text) and self._more():
                continue
            self._pos = end
            return value

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
