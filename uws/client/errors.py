"""The client's exceptions: one base class, so a script can catch everything UWS at once."""
from __future__ import annotations


class UWSError(Exception):
    """Anything that went wrong talking to a UWS server."""


class ConnectionFailed(UWSError):
    """No answer: the server could not be reached, or the connection broke."""


class HTTPError(UWSError):
    """The server answered with an error status; ``message`` is what it said."""

    def __init__(self, status: int, message: str, url: str):
        self.status = status
        self.message = message
        self.url = url
        super().__init__(f"HTTP {status} from {url}: {message}" if message else f"HTTP {status} from {url}")


class AuthError(HTTPError):
    """401: credentials missing or wrong."""


class Forbidden(HTTPError):
    """403: not allowed (another owner's job, or an action the job's phase refuses)."""


class NotFound(HTTPError):
    """404: no such job or resource (or it was deleted)."""


class ProtocolError(UWSError):
    """The server's answer is not what UWS says it should be (bad XML, missing element)."""


class Timeout(UWSError):
    """A wait ended before the job reached a final phase; ``job`` is the last one seen."""

    def __init__(self, message: str, job=None):
        self.job = job
        super().__init__(message)


def for_status(status: int, message: str, url: str) -> HTTPError:
    kinds: dict[int, type[HTTPError]] = {401: AuthError, 403: Forbidden, 404: NotFound}
    return kinds.get(status, HTTPError)(status, message, url)
