"""Pages of the job list (the List RPC, as Google's AIP-158 describes): the request's checks,
page tokens, and where a page ends.

A page token is base64url of a small JSON payload (where the previous page ended, and a digest
of the filters it was issued for) followed by an HMAC of it under the job store's key. A token
that was altered, cut short or issued by another daemon is refused rather than read as some
other place in the list, and one sent with other filters is refused as such.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass

from txd.daemon import validate
from txd.daemon.jobstore import Cursor, JobStore
from txd.schedulers.errors import InvalidArgument
from txd.v1 import AppState
from txd.v1.app_pb2 import AppStatus
from txd.v1.runner_pb2 import ListRequest

DEFAULT_PAGE_SIZE = 500
MAX_PAGE_SIZE = 1000
# A page is also cut at this many bytes of statuses, far below gRPC's 4 MiB message limit: a
# job with many replicas has a long status.
MAX_PAGE_BYTES = 1 << 20
_TOKEN_VERSION = 1
_MAC_BYTES = 16

Page = tuple[list[AppStatus], str]  # the statuses, and the next page's token ("" when last)


@dataclass(frozen=True)
class ListQuery:
    scheduler: str
    states: frozenset[int]
    created_since_ns: int | None
    backend: bool
    page_size: int
    after: Cursor | None  # where the previous page ended; None on the first page
    key: bytes  # signs the tokens

    @classmethod
    def parse(cls, req: ListRequest, key: bytes) -> ListQuery:
        if req.page_size < 0:
            raise InvalidArgument(
                "page_size",
                f"must be positive, or 0 for the default ({DEFAULT_PAGE_SIZE}); "
                f"got {req.page_size}",
            )
        if len(req.states) > validate.MAX_STATES:
            raise InvalidArgument(
                "states", f"{len(req.states)} entries, at most {validate.MAX_STATES}"
            )
        if req.HasField("created_since"):
            validate.check_timestamp("created_since", req.created_since)
        validate.check_text("page_token", req.page_token, validate.MAX_PAGE_TOKEN)
        known = set(AppState.values())
        for i, state in enumerate(req.states):
            if state not in known:
                raise InvalidArgument(f"states[{i}]", f"{state} is not an AppState")
        query = cls(
            scheduler=req.scheduler,
            states=frozenset(req.states),
            created_since_ns=(
                req.created_since.ToNanoseconds() if req.HasField("created_since") else None
            ),
            backend=req.backend,
            page_size=min(req.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE),
            after=None,
            key=key,
        )
        if not req.page_token:
            return query
        return dataclasses.replace(query, after=query._read_token(req.page_token))

    def from_store(self, store: JobStore) -> Page:
        rows = store.page(
            self.page_size + 1,  # one more than fits tells whether another page follows
            after=self.after,
            scheduler=self.scheduler,
            states=self.states,
            created_since_ns=self.created_since_ns,
        )
        return self._cut(rows)

    def from_statuses(self, statuses: Sequence[AppStatus]) -> Page:
        """A page of a whole list held in memory (a backend's answer), in the store's order."""
        rows = [
            (Cursor(s.created.ToNanoseconds() / 1e9, s.app_handle), s)
            for s in statuses
            if (not self.states or s.state in self.states)
            and (
                self.created_since_ns is None or s.created.ToNanoseconds() >= self.created_since_ns
            )
        ]
        rows.sort(key=lambda row: row[0], reverse=True)
        if self.after is not None:
            after = self.after
            rows = [row for row in rows if row[0] < after]
        return self._cut(rows[: self.page_size + 1])

    def _cut(self, rows: Sequence[tuple[Cursor, AppStatus]]) -> Page:
        """The page of up to page_size + 1 rows in list order: at most page_size of them, and
        fewer when they would pass MAX_PAGE_BYTES (never none, if there is one)."""
        out: list[AppStatus] = []
        size = 0
        last: Cursor | None = None
        for cursor, status in rows[: self.page_size]:
            n = status.ByteSize() + 8  # and the field's tag and length
            if out and size + n > MAX_PAGE_BYTES:
                break
            out.append(status)
            size += n
            last = cursor
        more = len(out) < len(rows)
        return out, self._token(last) if more and last is not None else ""

    # -- tokens -----------------------------------------------------------------------------

    def _filters_digest(self) -> str:
        filters = [self.scheduler, sorted(self.states), self.created_since_ns, self.backend]
        return hashlib.sha256(json.dumps(filters).encode()).hexdigest()[:16]

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self.key, payload, hashlib.sha256).digest()[:_MAC_BYTES]

    def _token(self, cursor: Cursor) -> str:
        # json writes a float as its repr, which reads back as the same float.
        fields = [_TOKEN_VERSION, self._filters_digest(), cursor.created, cursor.handle]
        payload = json.dumps(fields, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(payload + self._mac(payload)).decode().rstrip("=")

    def _read_token(self, token: str) -> Cursor:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, binascii.Error):
            raw = b""
        payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        if not payload or not hmac.compare_digest(mac, self._mac(payload)):
            raise InvalidArgument(
                "page_token",
                "not a token this daemon issued (altered or cut short?); "
                "list again from the first page, without a token",
            )
        fields = json.loads(payload)  # signed with our key: JSON we wrote
        if fields[0] != _TOKEN_VERSION:
            raise InvalidArgument(
                "page_token", "issued by another txd version; list again from the first page"
            )
        _, digest, created, handle = fields
        if digest != self._filters_digest():
            raise InvalidArgument(
                "page_token",
                "issued for other filters: scheduler, backend, states and created_since must "
                "stay as they were for the first page (only page_size may change)",
            )
        return Cursor(created, handle)
