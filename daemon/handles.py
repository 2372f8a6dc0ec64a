"""Which job a request names: a whole handle, an app id or a prefix of one, looked up in the job
store (the daemon's connection, or the read door's own)."""

from __future__ import annotations

from txd.daemon import validate
from txd.daemon.jobstore import JobRecord, StoreReads
from txd.schedulers.errors import InvalidArgument, NotFound

MAX_CANDIDATES = 10  # the jobs an ambiguous prefix's error names


def resolve(text: str, store: StoreReads) -> str:
    """The handle of the job `text` names: a whole handle (`{scheduler}://{session}/{app_id}`,
    returned as it is), a job's app id, or a prefix of one app id, as docker takes short
    container ids. An app id equal to `text` wins over longer ones it begins (job `123`
    over `1234`). Raises NotFound when nothing matches, InvalidArgument when several
    jobs do (naming the first MAX_CANDIDATES): the request as typed names no one job."""
    validate.check_handle(text)
    if "://" in text:
        return str(validate.parse_handle(text))
    if not text:
        raise InvalidArgument("app_handle", "empty: give a handle, an app id or its prefix")
    found = store.by_app_id_prefix(text, MAX_CANDIDATES + 1)
    exact = [handle for handle, app_id in found if app_id == text]
    if len(exact) == 1:
        return exact[0]
    candidates = exact or [handle for handle, _ in found]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise NotFound(
            f"no job {text!r}: no handle, app id or app id prefix of a known job "
            "(list known jobs with `txctl list`)"
        )
    total = len(candidates) if exact else store.count_app_id_prefix(text)
    shown = ", ".join(candidates[:MAX_CANDIDATES])
    more = f" and {total - MAX_CANDIDATES} more" if total > MAX_CANDIDATES else ""
    raise InvalidArgument(
        "app_handle",
        f"{text!r} matches {total} jobs: {shown}{more}; give more of the app id, "
        "or the whole handle",
    )


def stored(handle: str, store: StoreReads) -> JobRecord:
    """The store's record of the job `handle` (a resolved handle); NotFound if it has none."""
    rec = store.get(handle)
    if rec is None:
        raise NotFound(f"no job {handle} (list known jobs with `txctl list`)")
    return rec
