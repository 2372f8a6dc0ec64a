"""Bearer tokens for the TCP listener (`txd --listen tcp://...`), created by the user.

A token is `txd_` and 43 url-safe characters (256 random bits); the prefix lets secret scanners
find a leaked one. Only its SHA-256 is kept, in <state_dir>/tokens.json (0600), with its name,
creation, expiry and last use: the secret is printed once by `txd token create` and never again.
A SHA-256 of 256 random bits needs no salt or slow hash: nobody can guess what hashes to it.

A token has a scope: `all` (every call the Unix socket allows) or `read` (what observes jobs and
the daemon, nothing that runs, cancels or deletes a job: for dashboards and monitors; the
methods are listed in txd.daemon.auth, and a method added later is refused until listed).

Writers (`txd token create/revoke`, the daemon recording a last use) take <state_dir>/tokens.lock
and replace the file whole, so a reader never sees half a file. The daemon re-reads the file
when its inode, size or mtime change (one stat per call): a revocation or a new token counts
from the next call, with no restart. A file it cannot read or parse grants nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from txd.daemon.atomicfile import write_atomic

log = logging.getLogger(__name__)

PREFIX = "txd_"
STORE_FILE = "tokens.json"
LOCK_FILE = "tokens.lock"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_AGE = re.compile(r"(\d+)\s*([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
SCOPES = ("all", "read")
# A last use is written at most this often per token: a busy CI runner must not rewrite the
# file on every call. `txd token list` shows it to the minute.
LAST_USE_EVERY = 60.0


class TokenError(Exception):
    """A token command cannot be done (bad name or expiry, a name taken or unknown, the store
    unreadable); the message says what to do."""


@dataclass
class Token:
    name: str
    sha256: str  # hex digest of the secret
    created: float
    expires: float | None  # epoch seconds; None: never
    last_used: float | None = None
    scope: str = "all"  # SCOPES; stores written before scopes existed hold `all` tokens

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires


@dataclass(frozen=True)
class Verdict:
    """What a presented secret is worth: `name` (and its scope) when it is a live token's,
    else `reason` (which never contains the secret)."""

    name: str | None
    reason: str = ""
    scope: str = "all"


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()


def parse_expiry(text: str, now: float) -> float | None:
    """`30d`, `12h`, `90m`, `2w`, `3600s`; `never`; or an ISO date or time (UTC unless it says)."""
    text = text.strip().lower()
    if text == "never":
        return None
    age = _AGE.fullmatch(text)
    if age:
        seconds = int(age[1]) * _UNIT[age[2]]
        if seconds <= 0:
            raise TokenError(f"--expires {text!r}: give a duration above zero, e.g. 30d")
        return now + seconds
    try:
        when = dt.datetime.fromisoformat(text.upper() if "t" in text else text)
    except ValueError:
        raise TokenError(
            f"--expires {text!r}: expected a duration (30d, 12h, 90m, 2w), an ISO date or time, "
            "or 'never'"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    at = when.timestamp()
    if at <= now:
        raise TokenError(f"--expires {text!r} is in the past")
    return at


def format_time(at: float | None, never: str = "never") -> str:
    if at is None:
        return never
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


class TokenStore:
    """The tokens of one state dir."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / STORE_FILE
        self._seen: tuple[int, ...] | None = None
        self._tokens: list[Token] = []
        # name -> when this process last wrote its last use, on the monotonic clock: a wall
        # clock set back must not hold the next write off for as long
        self._written: dict[str, float] = {}

    # -- the user's commands ------------------------------------------------------------------

    def create(
        self, name: str, expires: float | None, now: float | None = None, scope: str = "all"
    ) -> str:
        """Adds a token and returns its secret (the only time it exists outside the caller)."""
        if scope not in SCOPES:
            raise TokenError(f"token scope {scope!r}: use one of {', '.join(SCOPES)}")
        if not _NAME.fullmatch(name):
            raise TokenError(
                f"token name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with "
                "a letter or digit"
            )
        secret = new_secret()
        with self._locked() as tokens:
            if any(t.name == name for t in tokens):
                raise TokenError(
                    f"a token named {name!r} exists: revoke it first (txd token revoke {name})"
                )
            when = time.time() if now is None else now
            tokens.append(Token(name, digest(secret).hex(), when, expires, scope=scope))
        return secret

    def revoke(self, name: str) -> None:
        with self._locked() as tokens:
            kept = [t for t in tokens if t.name != name]
            if len(kept) == len(tokens):
                raise TokenError(f"no token named {name!r} (txd token list shows them)")
            tokens[:] = kept

    def all(self) -> list[Token]:
        return self._read()

    def live(self, now: float | None = None) -> list[Token]:
        when = time.time() if now is None else now
        return [t for t in self._read() if not t.expired(when)]

    # -- the daemon ---------------------------------------------------------------------------

    def check(self, secret: str | None) -> Verdict:
        """Whose token `secret` is. Every stored hash is compared, in constant time, whatever
        matched before: the time taken says nothing about how close a guess was."""
        if not secret:
            return Verdict(None, "missing")
        tokens = self._current()
        presented = digest(secret)
        found: Token | None = None
        for token in tokens:
            if hmac.compare_digest(presented, bytes.fromhex(token.sha256)):
                found = token
        if found is None:
            return Verdict(None, "unknown or revoked")
        now = time.time()
        if found.expired(now):
            return Verdict(None, f"token {found.name!r} expired at {format_time(found.expires)}")
        self._note_use(found.name, now)
        return Verdict(found.name, scope=found.scope)

    def _current(self) -> list[Token]:
        """The tokens, re-read (and their privacy checked again) when the file, or its folder's
        owner or mode, changed since the last look: two stats a call."""
        try:
            folder, st = os.stat(self.state_dir), os.stat(self.path)
        except FileNotFoundError:
            self._seen, self._tokens = None, []
            return []
        except OSError as e:
            log.error("cannot read the token store %s: %s; refusing every token", self.path, e)
            return []
        seen = (
            *(folder.st_ino, folder.st_uid, folder.st_mode),
            *(st.st_ino, st.st_uid, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns),
        )
        if seen != self._seen:
            try:
                self.check_private()
                self._tokens = self._read()
            except TokenError as e:
                log.error("%s; refusing every token until it is fixed", e)
                self._tokens = []
            self._seen = seen
        return self._tokens

    def check_private(self) -> None:
        """Whoever can write the store, or replace it in its folder, can add a token: both must
        be the user's own, writable by nobody else."""
        uid = os.geteuid()
        for path in (self.state_dir, self.path):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise TokenError(f"cannot check {path}: {e.strerror}") from None
            if st.st_uid != uid or st.st_mode & 0o022:
                raise TokenError(
                    f"{path} is not private (owner uid {st.st_uid}, mode "
                    f"{st.st_mode & 0o7777:04o}): others could add a token; it must be yours "
                    "and writable by you only (chmod go-w)"
                )

    def _note_use(self, name: str, now: float) -> None:
        """Records a last use, at most every LAST_USE_EVERY seconds per token, and only when the
        lock is free at once: a last use is worth less than a stalled call."""
        tick = time.monotonic()
        if name in self._written and tick - self._written[name] < LAST_USE_EVERY:
            return
        self._written[name] = tick
        try:
            with self._locked(wait=False) as tokens:
                for token in tokens:
                    if token.name == name:
                        token.last_used = now
        except (TokenError, BlockingIOError) as e:
            log.debug("last use of token %r not recorded: %s", name, e)

    # -- the file -----------------------------------------------------------------------------

    def _read(self) -> list[Token]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise TokenError(f"cannot read the token store {self.path}: {e.strerror}") from None
        try:
            data = json.loads(text)
            tokens = [Token(**item) for item in data["tokens"]]
            if bad := [t.name for t in tokens if t.scope not in SCOPES]:
                raise ValueError(f"unknown scope of {bad}")
            for t in tokens:
                _check_fields(t)
            return tokens
        except (ValueError, KeyError, TypeError) as e:
            raise TokenError(
                f"the token store {self.path} is damaged ({type(e).__name__}): remove it and "
                "create the tokens again"
            ) from None

    @contextlib.contextmanager
    def _locked(self, wait: bool = True) -> Iterator[list[Token]]:
        """The tokens, to change in place; written back (whole, 0600) when the block ends."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise TokenError(f"cannot use the state dir {self.state_dir}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            tokens = self._read()
            yield tokens
            self._write(tokens)
        finally:
            os.close(fd)

    def _write(self, tokens: list[Token]) -> None:
        data = json.dumps({"tokens": [asdict(t) for t in tokens]}, indent=1) + "\n"
        write_atomic(self.path, data.encode(), mode=0o600, sync=True)


def _check_fields(t: Token) -> None:
    """Raises TypeError or ValueError for a field of the wrong kind: check() must never meet
    one (a hash that is not hex, a text expiry would raise there, on every call)."""
    if not isinstance(t.name, str) or not isinstance(t.sha256, str):
        raise TypeError("name and sha256 must be text")
    if len(t.sha256) != 64 or set(t.sha256) - set("0123456789abcdef"):
        raise ValueError("sha256 must be 64 hex digits")
    for value, optional in ((t.created, False), (t.expires, True), (t.last_used, True)):
        if optional and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError("created, expires and last_used must be epoch seconds")
