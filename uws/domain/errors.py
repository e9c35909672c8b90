"""Domain errors; the web layer maps each to its HTTP status."""


class UWSError(Exception):
    status = 500


class BadRequest(UWSError):
    """Malformed input (400)."""
    status = 400


class Forbidden(UWSError):
    """Not allowed for this caller or in the job's current phase (403)."""
    status = 403


class NotFound(UWSError):
    """No such service, job or resource (404)."""
    status = 404


class TooLarge(UWSError):
    """A body or upload beyond the configured limit (413)."""
    status = 413


class OverQuota(Forbidden):
    """A change that would take an owner past a quota of its service (403)."""

    def __init__(self, what: str, limit: int):
        super().__init__(f"over the limit of {limit} {what}")
        self.what = what        # "jobs" or "bytes"
        self.limit = limit
