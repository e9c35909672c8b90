"""Large uploads and downloads stream through bounded buffers: the application never
holds a whole file in memory (bench/memory.py measures the running server)."""
from __future__ import annotations

import hashlib
import io
import tracemalloc

from uwshelp import assert_303_to_job, path_of

#: one database is enough here (sending files; the store's side is in the protocol tests;
#: tests/README.rst)
BACKENDS = ("sqlite",)

SIZE = 24 * 1024 * 1024         # far above any buffer the server should hold
BOUND = 6 * 1024 * 1024         # what the application may allocate meanwhile
PIECE = 64 * 1024


class Generated(io.RawIOBase):
    """``head``, then ``size`` bytes of a repeated pattern, then ``tail``, made as they
    are read (so the test itself holds no copy) and hashed on the way."""

    def __init__(self, size: int, head: bytes = b"", tail: bytes = b""):
        super().__init__()
        self.parts = [head, None, tail]
        self.left = size
        self.length = len(head) + size + len(tail)
        self._pos = 0
        self.sha256 = hashlib.sha256()
        self._pattern = bytes(range(256)) * (PIECE // 256)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Only what the test client does to learn the length, before any read."""
        assert offset == 0 and self.left + len(self.parts[0] or b"") + len(self.parts[-1]) \
            == self.length, "seek after reading"
        self._pos = self.length if whence == io.SEEK_END else 0
        return self._pos

    def readinto(self, buffer) -> int:
        while self.parts:
            part = self.parts[0]
            if part is None:
                if self.left:
                    data = self._pattern[:min(len(buffer), PIECE, self.left)]
                    self.left -= len(data)
                    self.sha256.update(data)
                    break
                self.parts.pop(0)
            elif part:
                data, self.parts[0] = part[:len(buffer)], part[len(buffer):]
                break
            else:
                self.parts.pop(0)
        else:
            return 0
        buffer[:len(data)] = data
        self._pos += len(data)
        return len(data)


def peak_allocated(call):
    """``call()``'s result and the most memory Python allocated while it ran."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def stored_digest(client, path: str) -> str:
    r = client.get(f"{path}/parameters/FILE", buffered=False)
    digest = hashlib.sha256()
    for piece in r.response:
        digest.update(piece)
    r.close()
    return digest.hexdigest()


def pending_checksum_job(client) -> str:
    r = client.post("/checksum", data={"FILE": (io.BytesIO(b"small"), "a.bin")},
                    content_type="multipart/form-data")
    assert r.status_code == 303
    return path_of(r.headers["Location"])


def test_a_large_multipart_upload_is_never_held_in_memory(client):
    boundary = "bOuNdArY"
    body = Generated(SIZE, head=(f"--{boundary}\r\nContent-Disposition: form-data; name=\"FILE\"; "
                                 "filename=\"big.bin\"\r\n\r\n").encode(),
                     tail=f"\r\n--{boundary}--\r\n".encode())
    r, peak = peak_allocated(lambda: client.post(
        "/checksum", input_stream=body,
        content_type=f"multipart/form-data; boundary={boundary}"))
    assert r.status_code == 303
    assert peak < BOUND
    assert stored_digest(client, path_of(r.headers["Location"])) == body.sha256.hexdigest()


def test_a_large_put_of_a_files_bytes_is_never_held_in_memory(client):
    path = pending_checksum_job(client)
    body = Generated(SIZE)
    r, peak = peak_allocated(lambda: client.put(
        f"{path}/parameters/FILE", input_stream=body,
        content_type="application/octet-stream"))
    assert_303_to_job(r, path)
    assert peak < BOUND
    assert stored_digest(client, path) == body.sha256.hexdigest()


def test_a_large_download_is_sent_in_pieces(client):
    path = pending_checksum_job(client)
    body = Generated(SIZE)
    client.put(f"{path}/parameters/FILE", input_stream=body,
               content_type="application/octet-stream")
    digest, peak = peak_allocated(lambda: stored_digest(client, path))
    assert peak < BOUND
    assert digest == body.sha256.hexdigest()


def test_a_text_value_put_past_its_bound_answers_413_and_keeps_the_value(client):
    r = client.post("/sleep", data={"DURATION": "5"})
    path = path_of(r.headers["Location"])
    r = client.put(f"{path}/parameters/DURATION", data=b"1" * (1024 * 1024 + 1),
                   content_type="text/plain")
    assert r.status_code == 413
    assert client.get(f"{path}/parameters/DURATION").get_data(as_text=True) == "5"


def test_a_text_value_put_within_its_bound_is_read_whole(client):
    r = client.post("/sleep", data={"DURATION": "5"})
    path = path_of(r.headers["Location"])
    r = client.put(f"{path}/parameters/DURATION", data=b"7", content_type="text/plain")
    assert_303_to_job(r, path)
    assert client.get(f"{path}/parameters/DURATION").get_data(as_text=True) == "7"
