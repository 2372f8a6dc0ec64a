"""Every invalid AppDef, option and request field is INVALID_ARGUMENT naming the field (in the
message and as the google.rpc.BadRequest field path the client exposes as `.field`), through
Run and DryRun alike, and a rejected Run leaves nothing behind: no job, no process, no files."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from txd.client import InvalidArgumentError, NotFoundError
from txd.v1 import AppDef, AppState, BindMount, Mount, Resource, Role, VolumeMount
from txd_testing import pids_with_marker


def _role(name: str = "r", **kw: Any) -> Role:
    kw.setdefault("entrypoint", "true")
    return Role(name=name, **kw)


def _app(*roles: Role, name: str = "valid") -> AppDef:
    return AppDef(name=name, roles=list(roles) or [_role()])


# (id, app, cfg, field named in the message, extra text expected in the message)
CASES: list[tuple[str, AppDef, dict[str, Any], str, str]] = [
    ("empty-app-name", _app(name=""), {}, "app.name", "empty"),
    ("bad-app-name", _app(name="has space"), {}, "app.name", "has space"),
    ("app-name-trailing-newline", _app(name="ok\n"), {}, "app.name", "1-128"),
    ("app-name-too-long", _app(name="a" * 129), {}, "app.name", "1-128"),
    ("app-name-not-ascii", _app(name="caf\u00e9"), {}, "app.name", "1-128"),
    ("role-name-starts-with-dot", _app(_role(name=".r")), {}, "app.roles[0].name", "'.'"),
    ("role-name-dots", _app(_role(name="..")), {}, "app.roles[0].name", ""),
    ("no-roles", AppDef(name="noroles"), {}, "app.roles", "at least one role"),
    ("empty-role-name", _app(_role(name="")), {}, "app.roles[0].name", "empty"),
    ("empty-entrypoint", _app(_role(entrypoint="")), {}, "app.roles[0].entrypoint", "empty"),
    ("blank-entrypoint", _app(_role(entrypoint="  ")), {}, "app.roles[0].entrypoint", ""),
    ("replicas-0", _app(_role(num_replicas=0)), {}, "app.roles[0].num_replicas", ">= 1"),
    ("replicas-neg", _app(_role(num_replicas=-1)), {}, "app.roles[0].num_replicas", "-1"),
    (
        "min-gt-num",
        _app(_role(num_replicas=2, min_replicas=3)),
        {},
        "app.roles[0].min_replicas",
        "3",
    ),
    ("min-zero", _app(_role(num_replicas=2, min_replicas=0)), {}, "app.roles[0].min_replicas", ""),
    ("min-gt-default-num", _app(_role(min_replicas=2)), {}, "app.roles[0].min_replicas", ""),
    ("duplicate-roles", _app(_role("a"), _role("a")), {}, "app.roles[1].name", "duplicate"),
    (
        "second-role-bad",
        _app(_role("a"), _role("b", num_replicas=0)),
        {},
        "app.roles[1].num_replicas",
        "",
    ),
    ("negative-retries", _app(_role(max_retries=-1)), {}, "app.roles[0].max_retries", ""),
    ("env-name-with-eq", _app(_role(env={"A=B": "x"})), {}, "app.roles[0].env", "A=B"),
    ("bad-port", _app(_role(port_map={"c10d": 70000})), {}, "app.roles[0].port_map[c10d]", "70000"),
    ("negative-cpu", _app(_role(resource=Resource(cpu=-2))), {}, "app.roles[0].resource.cpu", ""),
    (
        "unknown-named-resource",
        _app(_role(resource=Resource(named="gpu.smal"))),
        {},
        "app.roles[0].resource.named",
        "gpu.small",
    ),
    (
        "mount-without-src",
        _app(_role(mounts=[Mount(bind=BindMount(dst_path="/x"))])),
        {},
        "app.roles[0].mounts[0].bind",
        "source",
    ),
    (
        "volume-without-dst",
        _app(_role(mounts=[Mount(volume=VolumeMount(src="v"))])),
        {},
        "app.roles[0].mounts[0].volume.dst_path",
        "",
    ),
    ("unknown-option", _app(), {"bogus": "1"}, "cfg.bogus", "prepend_cwd"),
    ("bool-option-given-int", _app(), {"prepend_cwd": 5}, "cfg.prepend_cwd", "bool"),
    ("bool-option-bad-str", _app(), {"prepend_cwd": "maybe"}, "cfg.prepend_cwd", "maybe"),
    ("str-option-given-int", _app(), {"log_dir": 5}, "cfg.log_dir", "str"),
    ("str-option-given-list", _app(), {"log_dir": ["a", "b"]}, "cfg.log_dir", ""),
    (
        "entrypoint-not-on-path",
        _app(_role(entrypoint="no-such-program-txd")),
        {},
        "app.roles[0].entrypoint",
        "no-such-program-txd",
    ),
    (
        "second-entrypoint-not-on-path",
        _app(_role("a"), _role("b", entrypoint="no-such-program-txd")),
        {},
        "app.roles[1].entrypoint",
        "no-such-program-txd",
    ),
]


def _job_dirs(shared_daemon: Any) -> set[Path]:
    base = shared_daemon.state_dir / "schedulers" / "local_cwd" / "logs"
    return set(base.glob("*/*"))


@pytest.mark.parametrize("verb", ["run", "dryrun"])
@pytest.mark.parametrize(
    ("app", "cfg", "field", "extra"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
async def test_invalid_request(
    client: Any,
    shared_daemon: Any,
    verb: str,
    app: AppDef,
    cfg: dict[str, Any],
    field: str,
    extra: str,
) -> None:
    before = [a.app_handle for a in await client.list()]
    dirs = _job_dirs(shared_daemon)
    with pytest.raises(InvalidArgumentError) as info:
        await getattr(client, verb)(app, cfg=cfg)
    message = info.value.message
    assert message.startswith(f"{field}: "), message
    assert extra in message, message
    assert info.value.field == field
    assert info.value.violations == [(field, message.removeprefix(f"{field}: "))]
    # Nothing half-submitted: no job recorded, no log directory created.
    assert [a.app_handle for a in await client.list()] == before
    assert _job_dirs(shared_daemon) == dirs


@pytest.mark.parametrize("verb", ["run", "dryrun"])
async def test_unknown_scheduler_is_not_found(client: Any, verb: str) -> None:
    before = len(await client.list())
    with pytest.raises(NotFoundError, match=r"nosuchsched.*local_cwd"):
        await getattr(client, verb)(_app(), scheduler="nosuchsched")
    assert len(await client.list()) == before


@pytest.mark.parametrize("verb", ["run", "dryrun"])
async def test_missing_cwd(client: Any, verb: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^cwd: "):
        await getattr(client, verb)(_app(), cwd=str(tmp_path / "gone"))


async def test_request_id_too_long(client: Any) -> None:
    before = len(await client.list())
    with pytest.raises(InvalidArgumentError, match=r"^request_id: "):
        await client.run(_app(), request_id="x" * 129)
    assert len(await client.list()) == before


async def test_failed_spawn_leaves_nothing_running(daemon: Any, workdir: Path) -> None:
    """Role a starts, role b cannot be executed: the whole Run is undone. (A daemon of its own:
    its log is checked at teardown for errors in the clean-up.)"""
    bad = workdir / "badexec"
    bad.write_bytes(b"\x00\x01 not a program\n")
    bad.chmod(0o755)
    marker = f"300.{uuid.uuid4().int % 10**9}"
    app = AppDef(
        name="halfway",
        roles=[
            Role(name="a", entrypoint="sleep", args=[marker]),
            Role(name="b", entrypoint="./badexec"),
        ],
    )
    async with daemon.client() as client:
        with pytest.raises(InvalidArgumentError, match=r"badexec|b/0"):
            await client.run(app, cwd=str(workdir))
        assert pids_with_marker(marker) == [], "role a's replica was left running"
        assert await client.list() == []
        assert _job_dirs(daemon) == set()
        # The daemon goes on serving.
        handle = await client.run(_app(), cwd=str(workdir))
        assert (await client.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    assert daemon.stop() == 0


async def test_dryrun_applies_defaults(client: Any, workdir: Path) -> None:
    before = len(await client.list())
    app = AppDef(
        name="dry",
        roles=[
            Role(
                name="a",
                entrypoint="echo",
                args=["${app_id}"],
                resource=Resource(named="gpu.small", capabilities={"k": "v"}),
            ),
        ],
    )
    resp = await client.dryrun(app, cwd=str(workdir))
    assert resp.scheduler == "local_cwd"
    role = resp.app.roles[0]
    assert role.HasField("num_replicas") and role.num_replicas == 1
    assert (role.resource.cpu, role.resource.gpu, role.resource.mem_mb) == (8, 1, 32 * 1024)
    assert role.resource.named == "gpu.small"
    assert role.resource.capabilities["k"] == "v"
    assert "dry-" in resp.request  # the native request names the app id it would use
    assert str(workdir) in resp.request
    assert len(await client.list()) == before


@pytest.mark.parametrize("name", ["a", "A_b-c.9", "_x", "9" * 128])
async def test_valid_names(client: Any, name: str) -> None:
    """The naming rule app.proto states: 1-128 of [A-Za-z0-9_.-], not starting with '.' or '-'."""
    resp = await client.dryrun(_app(_role(name=name), name=name))
    assert resp.app.name == name and resp.app.roles[0].name == name


async def test_valid_request_after_rejections_still_runs(client: Any) -> None:
    handle = await client.run(_app(_role(entrypoint="true")))
    assert (await client.wait(handle, timeout=30)).state == AppState.SUCCEEDED
