"""List, a page at a time (AIP-158): 20,000 jobs list through txctl and the client (one
unpaged response was over gRPC's 4 MiB limit), pages stay exact while jobs come and go,
filters, page sizes and tokens, and a backend's list paged by the daemon."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from txd.client import InvalidArgumentError
from txd.daemon.jobstore import JobRecord, JobStore
from txd.v1 import AppDef, AppState, AppStatus, ReplicaStatus, Role, RoleStatus
from txd_testing import Daemon, install_plugin, remove_tree, sh_app, short_tmpdir

BIG = 20_000
BASE = 1600000000.0  # 2020-09-13: older than any job the tests submit
TERMINAL = (AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED)


def _record(
    i: int,
    created: float,
    scheduler: str = "local_cwd",
    state: int = AppState.SUCCEEDED,
    msg: str = "replica trainer/0 exited with 0 after 3h12m on gpu-node-0001.cluster.example.org",
) -> JobRecord:
    """A finished job as the daemon records it: about 290 bytes of status."""
    app_id = f"filler-{i:05d}x"
    handle = f"{scheduler}://txd/{app_id}"
    replicas = [
        ReplicaStatus(
            id=k, state=state, role="trainer", hostname="gpu-node-0001.cluster.example.org"
        )
        for k in range(2)
    ]
    status = AppStatus(
        state=state,
        msg=msg,
        roles=[RoleStatus(role="trainer", replicas=replicas)],
        app_handle=handle,
        scheduler=scheduler,
        app_id=app_id,
        name="filler",
    )
    status.created.FromNanoseconds(int(created * 1e9))
    status.updated.FromNanoseconds(int((created + 60) * 1e9))
    return JobRecord(
        handle=handle,
        scheduler=scheduler,
        app_id=app_id,
        created=created,
        app=AppDef(name="filler", roles=[Role(name="trainer", entrypoint="python")]),
        status=status,
        cfg={},
        # local_cwd finds a finished job's logs here (none: Delete has nothing to remove).
        native={"app_dir": f"/nonexistent/txd-filler/{app_id}", "replicas": []},
    )


def _newest_first(records: list[JobRecord]) -> list[str]:
    return [r.handle for r in sorted(records, key=lambda r: (r.created, r.handle), reverse=True)]


def _write_store(path: Path, records: list[JobRecord]) -> None:
    store = JobStore(path)
    try:
        store.insert_many(records)
    finally:
        store.close()


def _start_on(d: Daemon, db: Path) -> Daemon:
    """Starts d on a copy of the job store file db."""
    d.state_dir.mkdir(mode=0o700)
    shutil.copy(db, d.state_dir / "registry.db")
    return d.start()


def _log_alarms(d: Daemon) -> list[str]:
    alarms = ("Traceback", "Task exception was never retrieved", "internal error")
    return [line for line in d.log().splitlines() if any(a in line for a in alarms)]


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A job store with 20,000 finished jobs, two by two created at the same time (the handle
    orders those); and their handles, newest first."""
    records = [_record(i, BASE + (i // 2) * 0.25) for i in range(BIG)]
    # As one ListResponse they are well over gRPC's default 4 MiB message limit.
    assert sum(r.status.ByteSize() + 3 for r in records) > 1.2 * 4 * 1024 * 1024
    path = tmp_path_factory.mktemp("big") / "registry.db"
    _write_store(path, records)
    return path, _newest_first(records)


@pytest.fixture(scope="module")
def big_daemon(big_db: tuple[Path, list[str]]) -> Iterator[Daemon]:
    """A daemon on the 20,000 jobs, for tests that change nothing."""
    root = short_tmpdir()
    d = _start_on(Daemon(root), big_db[0])
    try:
        yield d
    finally:
        d.close()
        alarms = _log_alarms(d)
        remove_tree(root)
    assert not alarms, alarms


# -- 20,000 jobs --------------------------------------------------------------------------------


@pytest.mark.slow
def test_txctl_lists_20000_jobs(big_daemon: Daemon, big_db: tuple[Path, list[str]]) -> None:
    """One response held all of them before, over gRPC's 4 MiB limit: RESOURCE_EXHAUSTED."""
    expected = big_db[1]
    proc = big_daemon.txctl("list", "--json", check=0, timeout=120)
    assert [a["app_handle"] for a in json.loads(proc.stdout)] == expected
    text = big_daemon.txctl("list", check=0, timeout=120).stdout.splitlines()
    assert text[0].split() == ["HANDLE", "NAME", "STATE", "CREATED"]
    assert [line.split()[0] for line in text[1:]] == expected
    # Columns line up from the first row to the last.
    assert len({line.index(" filler ") for line in text[1:]}) == 1
    newest = big_daemon.txctl("list", "--limit", "3", "--json", check=0)
    assert [a["app_handle"] for a in json.loads(newest.stdout)] == expected[:3]
    assert len(big_daemon.txctl("list", "--limit", "3", check=0).stdout.splitlines()) == 4


@pytest.mark.slow
async def test_client_lists_20000_jobs_page_by_page(
    big_daemon: Daemon, big_db: tuple[Path, list[str]]
) -> None:
    expected = big_db[1]
    async with big_daemon.client() as c:
        assert [a.app_handle for a in await c.list()] == expected
        assert [a.app_handle for a in await c.list(page_size=7000)] == expected
        assert [a.app_handle for a in await c.list(limit=1234)] == expected[:1234]
        first = await c.list_page()
        assert len(first.apps) == 500  # the default page size
        capped = await c.list_page(page_size=5000)
        assert len(capped.apps) == 1000  # the largest
        assert [a.app_handle for a in capped.apps] == expected[:1000]
        tail = await c.list_page(page_size=1000, page_token=capped.next_page_token)
        assert [a.app_handle for a in tail.apps] == expected[1000:2000]
        # The last page says so with an empty token.
        seen, token = 0, ""
        for _ in range(BIG // 1000):
            page = await c.list_page(page_size=1000, page_token=token)
            seen, token = seen + len(page.apps), page.next_page_token
        assert (seen, token) == (BIG, "")


@pytest.mark.slow
async def test_pages_are_exact_while_jobs_come_and_go(
    unstarted_daemon: Daemon, big_db: tuple[Path, list[str]], workdir: Path
) -> None:
    """Keyset pages: a job submitted while paging does not push older jobs onto the next page
    (offsets would list one twice), and a job deleted from a page already read does not pull
    one back (offsets would skip one)."""
    d = _start_on(unstarted_daemon, big_db[0])
    expected = big_db[1]
    deleted_ahead = expected[2500]
    pages: list[list[str]] = []
    async with d.client() as c:
        token = ""
        for n in range(BIG // 1000 + 1):
            page = await c.list_page(page_size=1000, page_token=token)
            pages.append([a.app_handle for a in page.apps])
            token = page.next_page_token
            if not token:
                break
            if n == 0:
                for k in range(3):
                    new = await c.run(sh_app("true", name=f"new{k}"), cwd=str(workdir))
                    assert (await c.wait(new, timeout=30)).state == AppState.SUCCEEDED
                await c.delete(expected[10])
                await c.delete(expected[999])
                await c.delete(deleted_ahead)
            if n == 1:
                await c.run(sh_app("true", name="new3"), cwd=str(workdir))
        newest = [a.name for a in (await c.list_page(page_size=4)).apps]
    listed = [h for page in pages for h in page]
    assert len(listed) == len(set(listed)), "a job was listed twice"
    assert listed == [h for h in expected if h != deleted_ahead]
    assert [len(p) for p in pages] == [1000] * 19 + [999]
    assert sorted(newest) == ["new0", "new1", "new2", "new3"]


# -- filters, sizes, tokens ---------------------------------------------------------------------

SCHEDULERS = ("local_cwd", "slurm", "lsf")


@pytest.fixture(scope="module")
def small_records() -> list[JobRecord]:
    """60 jobs over three schedulers and the three final states, 10 s apart, two by two
    created at the same time."""
    return [
        _record(i, BASE + (i // 2) * 10.0 + 0.123456, SCHEDULERS[i % 3], TERMINAL[(i // 3) % 3])
        for i in range(60)
    ]


@pytest.fixture(scope="module")
def small_daemon(
    small_records: list[JobRecord], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemon]:
    db = tmp_path_factory.mktemp("small") / "registry.db"
    _write_store(db, small_records)
    root = short_tmpdir()
    d = _start_on(Daemon(root), db)
    try:
        yield d
    finally:
        d.close()
        alarms = _log_alarms(d)
        remove_tree(root)
    assert not alarms, alarms


async def test_filters_select_and_page_alike(
    small_daemon: Daemon, small_records: list[JobRecord]
) -> None:
    def want(*, scheduler: str = "", states: tuple[int, ...] = (), since: int = 0) -> list[str]:
        return _newest_first(
            [
                r
                for r in small_records
                if (not scheduler or r.scheduler == scheduler)
                and (not states or r.status.state in states)
                and r.status.created.ToNanoseconds() >= since
            ]
        )

    # A job's own reported creation time (as a datetime: to the microsecond below) selects
    # it and every later one.
    since_dt = small_records[37].status.created.ToDatetime(dt.UTC)
    since = Timestamp()
    since.FromDatetime(since_dt)
    since_ns = since.ToNanoseconds()
    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({}, want()),
        ({"scheduler": "slurm"}, want(scheduler="slurm")),
        ({"states": [AppState.FAILED, AppState.CANCELLED]}, want(states=TERMINAL[1:])),
        ({"created_since": since_dt}, want(since=since_ns)),
        (
            {"scheduler": "lsf", "states": [AppState.SUCCEEDED], "created_since": since_dt},
            want(scheduler="lsf", states=(AppState.SUCCEEDED,), since=since_ns),
        ),
    ]
    async with small_daemon.client() as c:
        for kw, expected in cases:
            assert expected, kw  # each case selects something ...
            assert len(expected) < len(small_records) or not kw  # ... and filters
            for size in (0, 1, 4, 7):
                got = [a.app_handle for a in await c.list(page_size=size, **kw)]
                assert got == expected, (kw, size)
        assert small_records[37].handle in want(since=since_ns)
        assert small_records[35].handle not in want(since=since_ns)
        assert await c.list(states=[AppState.RUNNING]) == []
    proc = small_daemon.txctl("list", "--json", "-s", "slurm", check=0)
    assert [a["app_handle"] for a in json.loads(proc.stdout)] == want(scheduler="slurm")


async def test_bad_page_size_and_state_are_invalid(small_daemon: Daemon) -> None:
    async with small_daemon.client() as c:
        with pytest.raises(InvalidArgumentError, match=r"^page_size: must be positive"):
            await c.list_page(page_size=-1)
        with pytest.raises(InvalidArgumentError, match=r"^states\[1\]: 42 is not an AppState"):
            await c.list_page(states=[AppState.FAILED, 42])
    proc = small_daemon.txctl("list", "--limit", "0", check=2)
    assert "--limit: expected a positive whole number" in proc.stderr


def _altered(token: str) -> str:
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[len(raw) // 3] ^= 0x01  # one bit, in the payload (the place in the list)
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


async def test_tokens_that_are_not_ours_are_invalid(
    small_daemon: Daemon, big_daemon: Daemon
) -> None:
    async with small_daemon.client() as c, big_daemon.client() as other:
        token = (await c.list_page(page_size=5)).next_page_token
        assert token
        from_other = (await other.list_page(page_size=5)).next_page_token
        for bad in ("garbage", "!!", token[:-4], token[: len(token) // 2], _altered(token)):
            with pytest.raises(InvalidArgumentError, match=r"^page_token: not a token this"):
                await c.list_page(page_size=5, page_token=bad)
        with pytest.raises(InvalidArgumentError, match=r"^page_token: not a token this"):
            await c.list_page(page_size=5, page_token=from_other)
        assert len((await c.list_page(page_size=5, page_token=token)).apps) == 5


async def test_a_token_is_bound_to_its_filters(
    small_daemon: Daemon, small_records: list[JobRecord]
) -> None:
    slurm = [h for h in _newest_first(small_records) if h.startswith("slurm:")]
    since = dt.datetime.fromtimestamp(BASE, dt.UTC)
    async with small_daemon.client() as c:
        first = await c.list_page("slurm", page_size=3)
        token = first.next_page_token
        for kw in (
            {"scheduler": ""},
            {"scheduler": "lsf"},
            {"scheduler": "slurm", "states": [AppState.FAILED]},
            {"scheduler": "slurm", "created_since": since},
        ):
            with pytest.raises(InvalidArgumentError, match=r"^page_token: issued for other"):
                await c.list_page(page_size=3, page_token=token, **kw)
        # The page size may change from page to page.
        rest = await c.list_page("slurm", page_size=100, page_token=token)
        assert [a.app_handle for a in [*first.apps, *rest.apps]] == slurm
        assert rest.next_page_token == ""


async def test_pages_are_cut_below_the_message_limit(unstarted_daemon: Daemon) -> None:
    """16 jobs of 300 kB statuses each (a job with very many replicas): 4.8 MB as one page."""
    records = [_record(i, BASE + i, msg="x" * 300_000) for i in range(16)]
    db = unstarted_daemon.root / "big-statuses.db"
    _write_store(db, records)
    d = _start_on(unstarted_daemon, db)
    async with d.client() as c:
        page = await c.list_page(page_size=16)
        assert 1 <= len(page.apps) <= 4
        assert page.ByteSize() < 1_100_000
        assert page.next_page_token
        assert [a.app_handle for a in await c.list()] == _newest_first(records)
        # The limit is the client's: it stops asking once it has enough.
        assert [a.app_handle for a in await c.list(limit=5)] == _newest_first(records)[:5]


def test_txctl_list_json_is_the_same_text_as_before(small_daemon: Daemon) -> None:
    """Printed element by element, the JSON reads as json.dumps(list, indent=2) did."""
    out = small_daemon.txctl("list", "--json", "-s", "lsf", check=0).stdout
    assert out == json.dumps(json.loads(out), indent=2) + "\n"
    assert len(json.loads(out)) == 20
    one = small_daemon.txctl("list", "--json", "--limit", "1", "-s", "lsf", check=0).stdout
    assert one == json.dumps(json.loads(out)[:1], indent=2) + "\n"


# -- a backend's own list -----------------------------------------------------------------------


@pytest.fixture
def fakelist_daemon() -> Iterator[Daemon]:
    root = short_tmpdir()
    install_plugin(root / "site", "fakelist", "fakepoll")
    path = [str(root / "site"), *filter(None, [os.environ.get("PYTHONPATH")])]
    d = Daemon(root, env={"PYTHONPATH": os.pathsep.join(path)}).start()
    try:
        yield d
    finally:
        d.close()
        alarms = _log_alarms(d)
        remove_tree(root)
    assert not alarms, alarms


async def test_backend_list_is_paged_by_the_daemon(fakelist_daemon: Daemon) -> None:
    """fakelist lists every job file it finds, txd's or not: the daemon pages its answer."""
    jobs = fakelist_daemon.state_dir / "schedulers" / "fakelist"
    jobs.mkdir(parents=True)
    states = ["SUCCEEDED", "FAILED", "CANCELLED"]
    for i in range(7):
        path = jobs / f"outside-{i}.job"
        path.write_text(states[i % 3])
        when = int((BASE + (i // 2)) * 1e9)  # two by two at the same time
        os.utime(path, ns=(when, when))
    expected = [f"fakelist://txd/outside-{i}" for i in (6, 5, 4, 3, 2, 1, 0)]
    assert fakelist_daemon.txctl("list", "--json", check=0).stdout == "[]\n"
    assert fakelist_daemon.txctl("list", check=0).stdout.split() == [
        "HANDLE",
        "NAME",
        "STATE",
        "CREATED",
    ]
    async with fakelist_daemon.client() as c:
        pages, tokens = [], [""]
        for _ in range(4):
            page = await c.list_page("fakelist", True, page_size=3, page_token=tokens[-1])
            pages.append([a.app_handle for a in page.apps])
            tokens.append(page.next_page_token)
            if not tokens[-1]:
                break
        assert pages == [expected[:3], expected[3:6], expected[6:]]
        failed = await c.list("fakelist", True, states=[AppState.FAILED], page_size=1)
        assert [a.app_id for a in failed] == ["outside-4", "outside-1"]
        # A backend listing's token does not page the job store's list.
        with pytest.raises(InvalidArgumentError, match=r"^page_token: issued for other"):
            await c.list_page("fakelist", False, page_size=3, page_token=tokens[1])


def test_blocking_client_pages_alike(small_daemon: Daemon, small_records: list[JobRecord]) -> None:
    from txd.client import Client

    expected = _newest_first(small_records)
    with Client(small_daemon.socket) as c:
        assert [a.app_handle for a in c.list(page_size=7)] == expected
        assert [a.app_handle for a in c.list(limit=9, page_size=4)] == expected[:9]
        it = c.list_iter(page_size=2)
        assert [next(it).app_handle for _ in range(3)] == expected[:3]
        it.close()  # stopping early ends the iterator cleanly
        page = c.list_page("lsf", states=[AppState.FAILED], page_size=2)
        lsf_failed = [
            r for r in small_records if r.scheduler == "lsf" and r.status.state == AppState.FAILED
        ]
        assert [a.app_handle for a in page.apps] == _newest_first(lsf_failed)[:2]
        with pytest.raises(ValueError, match="limit must be at least 1"):
            c.list(limit=0)
