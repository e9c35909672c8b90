"""HTTP Basic passwords, checked without letting anyone flood the server with hashing.

A werkzeug password hash is slow and, with scrypt, takes 32 MiB of memory on purpose,
so unchecked concurrent guesses exhaust the machine.  Hence:

- at most ``max_concurrent_checks`` hashes run at once; a request that gets no slot
  within ``check_wait`` seconds answers 503 with ``Retry-After``;
- an address or a user name with too many failures in the current window answers 429
  with ``Retry-After``, without hashing;
- a successful check is remembered for ``cache_seconds``, under an HMAC of the name and
  password with a secret of this process (never the password itself);
- an unknown name costs one hash of the users' method, like a known one, so response
  times do not tell which names exist.

A bearer token typed into the sign-in page (:mod:`.signin`) is checked here too: a
wrong one counts as a failure of its address, and an address with too many failures
answers 429 there, right token or not.
"""
from __future__ import annotations

import collections
import functools
import hashlib
import hmac
import math
import secrets
import threading
import time
from collections import Counter

from werkzeug.security import check_password_hash, generate_password_hash

from ..auth import AuthConfig
from ..domain.errors import UWSError

#: Addresses and names whose failures are counted at once (the oldest are forgotten).
TRACKED = 10_000


class RetryLater(UWSError):
    """Refused for now; ``retry_after`` seconds is when to try again."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = max(1, retry_after)


class Busy(RetryLater):
    status = 503


class TooManyFailures(RetryLater):
    status = 429


class PasswordGate:
    """Checks a name and password against ``[auth.users]`` within the limits above."""

    def __init__(self, cfg: AuthConfig, clock=time.monotonic):
        self.users = cfg.users
        self._slots = threading.BoundedSemaphore(cfg.max_concurrent_checks)
        self._wait = cfg.check_wait
        self._by_address = FailureCounts(cfg.max_failures_per_address, cfg.failure_window, clock)
        self._by_user = FailureCounts(cfg.max_failures_per_user, cfg.failure_window, clock)
        self._known = Remembered(cfg.cache_seconds, cfg.cache_size, clock)

    def check(self, address: str, user: str, password: str) -> bool:
        """True for the right password; False for a wrong one or an unknown user;
        :class:`RetryLater` when the check cannot be made now."""
        if self._known.recalls(user, password):
            return True
        self._refuse_if_failing(address, user)
        if not self._slots.acquire(timeout=self._wait):
            raise Busy("too many password checks at once; try again shortly", 1)
        try:
            self._refuse_if_failing(address, user)  # failures may have come while waiting
            right = check_password_hash(self.users.get(user) or self._dummy, password)
        finally:
            self._slots.release()
        if right and user in self.users:
            self._known.remember(user, password)
            return True
        self._by_address.add(address)
        self._by_user.add(user)
        return False

    def check_token(self, address: str, token: str, cfg: AuthConfig) -> str | None:
        """The name ``token`` stands for; None for a wrong one (counted against
        ``address``); :class:`TooManyFailures` while ``address`` has failed too often."""
        wait = self._by_address.blocked_for(address)
        if wait:
            raise TooManyFailures(f"too many failed sign-ins; try again in {wait} s", wait)
        name = cfg.token_owner(token)
        if name is None:
            self._by_address.add(address)
        return name

    def _refuse_if_failing(self, address: str, user: str) -> None:
        wait = max(self._by_address.blocked_for(address), self._by_user.blocked_for(user))
        if wait:
            raise TooManyFailures(f"too many failed logins; try again in {wait} s", wait)

    @functools.cached_property
    def _dummy(self) -> str:
        """A hash no password matches, of the method most users' hashes have."""
        methods = Counter(stored.split("$", 1)[0] for stored in self.users.values())
        method = methods.most_common(1)[0][0] if methods else "scrypt"
        return generate_password_hash(secrets.token_urlsafe(32), method=method)


class FailureCounts:
    """Failures per key in fixed windows of ``window`` seconds; ``limit`` 0 = none."""

    def __init__(self, limit: int, window: int, clock):
        self.limit, self.window, self.clock = limit, window, clock
        self._counts: collections.OrderedDict[str, tuple[float, int]] = \
            collections.OrderedDict()
        self._lock = threading.Lock()

    def blocked_for(self, key: str) -> int:
        """Seconds until ``key`` may try again (0: now)."""
        if not self.limit:
            return 0
        with self._lock:
            start, count = self._current(key)
        left = start + self.window - self.clock()
        return math.ceil(left) if count >= self.limit and left > 0 else 0

    def add(self, key: str) -> None:
        if not self.limit:
            return
        with self._lock:
            start, count = self._current(key)
            self._counts.pop(key, None)
            self._counts[key] = (start, count + 1)
            while len(self._counts) > TRACKED:
                self._counts.popitem(last=False)

    def _current(self, key: str) -> tuple[float, int]:
        now = self.clock()
        start, count = self._counts.get(key, (now, 0))
        return (start, count) if now - start < self.window else (now, 0)


class Remembered:
    """Recently verified (name, password) pairs, as keyed digests; bounded, expiring."""

    def __init__(self, seconds: int, size: int, clock):
        self.seconds, self.size, self.clock = seconds, size, clock
        self._secret = secrets.token_bytes(32)
        self._until: collections.OrderedDict[bytes, float] = collections.OrderedDict()
        self._lock = threading.Lock()

    def _digest(self, user: str, password: str) -> bytes:
        name = user.encode("utf-8", "surrogatepass")
        # the name's length first: ("a:b", "c") and ("a", "b:c") must differ
        message = len(name).to_bytes(4, "big") + name + password.encode("utf-8", "surrogatepass")
        return hmac.new(self._secret, message, hashlib.sha256).digest()

    def recalls(self, user: str, password: str) -> bool:
        if not self.seconds:
            return False
        key = self._digest(user, password)
        with self._lock:
            until = self._until.get(key)
            if until is not None and until <= self.clock():
                del self._until[key]
                until = None
        return until is not None

    def remember(self, user: str, password: str) -> None:
        if not self.seconds:
            return
        key = self._digest(user, password)
        with self._lock:
            self._until.pop(key, None)
            self._until[key] = self.clock() + self.seconds
            while len(self._until) > self.size:
                self._until.popitem(last=False)
