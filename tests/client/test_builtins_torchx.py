"""Every builtin builds exactly TorchX 0.7's AppDef for the same arguments (issue 20, gap 4).

TorchX's AppDef comes from its own component function (and, for command lines, its own
argument parser, `materialize_appdef`), converted with txd.client.torchx_compat.from_torchx;
txd's from its builtin. The whole messages must be equal. TorchX resolves a named resource
(`-h gpu.small`) in the component, txd in the daemon from the same table: txd's side gets the
daemon's resolution (`_resolved`) before the comparison.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import typing
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from txd import resources
from txd.client.components import builtins, resolve
from txd.client.torchx_compat import from_torchx
from txd.v1 import AppDef

pytest.importorskip("torchx.components")
from torchx.specs.builders import materialize_appdef
from torchx.specs.finder import ModuleComponentsFinder

# Parameters txd's builtins have and TorchX's do not: each is off unless given (docs/cli.md,
# "Builtins", says why).
TXD_ONLY_PARAMS = {"dist.ddp": {"rdzv_conf"}, "utils.sh": {"entrypoint"}}
# Builtins txd has and TorchX 0.7 does not.
TXD_ONLY_BUILTINS: set[str] = set()


@pytest.fixture(autouse=True)
def _no_loglevel(monkeypatch: pytest.MonkeyPatch) -> None:
    # ddp and sh copy the caller's LOGLEVEL into the role's env (both TorchX and txd).
    monkeypatch.delenv("LOGLEVEL", raising=False)


@pytest.fixture(autouse=True)
def _quiet_torchx() -> Iterator[None]:
    # TorchX's spmd warns when -j's processes differ from the host's GPUs; txd does not.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="In `-j ", category=UserWarning)
        yield


@functools.cache
def _torchx_builtins() -> dict[str, Callable[..., Any]]:
    """TorchX's builtins as `torchx builtins` lists them (without entry-point components)."""
    found = ModuleComponentsFinder("torchx.components", "").find()
    return {c.name: c.fn for c in found if not c.validation_errors}


def _txd_fn(name: str) -> Callable[..., Any]:
    module, _, fn = name.partition(".")
    return getattr(importlib.import_module(f"txd.client.components.{module}"), fn)  # type: ignore[no-any-return]


def _resolved(app: AppDef) -> AppDef:
    """app with each named resource replaced by its values, as the daemon does (without the
    daemon's note of the name, which a TorchX app cannot carry)."""
    out = AppDef()
    out.CopyFrom(app)
    for role in out.roles:
        if role.resource.named:
            named = resources.lookup(role.resource.named)
            named.capabilities.update(role.resource.capabilities)
            role.resource.CopyFrom(named)
    return out


def _same(txd_app: AppDef, torchx_app: Any) -> None:
    want = from_torchx(torchx_app)
    got = _resolved(txd_app)
    assert got == want, f"txd:\n{got}\nTorchX:\n{want}"


# -- the list and the signatures -----------------------------------------------------------------


def test_txd_has_every_torchx_builtin() -> None:
    assert set(builtins()) - TXD_ONLY_BUILTINS == set(_torchx_builtins())
    assert len(builtins()) == 11


def _shape(tp: Any) -> Any:
    """An annotation as (origin, args) with unions as sets: Optional[Dict[str, str]] and
    dict[str, str] | None compare equal."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        return ("union", frozenset(_shape(a) for a in args))
    if origin is None:
        return tp
    return (origin, tuple(_shape(a) for a in args))


# TorchX's serve.torchserve takes Dict[str, object], which its own command line cannot decode
# (`object("1")` raises TypeError); txd's takes strings, which it passes on unchanged.
_ANNOTATION_DIFFERS = {("serve.torchserve", "params")}


@pytest.mark.parametrize("name", sorted(_torchx_builtins()))
def test_parameters_names_kinds_defaults_and_types_are_torchx(name: str) -> None:
    theirs = inspect.signature(_torchx_builtins()[name]).parameters
    ours_fn = _txd_fn(name)
    ours = inspect.signature(ours_fn).parameters
    extra = TXD_ONLY_PARAMS.get(name, set())
    assert set(ours) - set(theirs) == extra
    assert [p for p in ours if p not in extra] == list(theirs), "order"
    their_hints = typing.get_type_hints(_torchx_builtins()[name])
    our_hints = typing.get_type_hints(ours_fn)
    for pname, p in theirs.items():
        q = ours[pname]
        assert (q.kind, q.default) == (p.kind, p.default), pname
        assert type(q.default) is type(p.default), pname  # 3600 stays an int: "3600" in args
        if (name, pname) not in _ANNOTATION_DIFFERS:
            assert _shape(our_hints[pname]) == _shape(their_hints[pname]), pname
    for pname in extra:
        assert ours[pname].default is None, pname
    assert typing.get_type_hints(ours_fn)["return"] is AppDef


# -- function calls ---------------------------------------------------------------------------

_ODD = ("a b", "$HOME", "${app_id}", "it's", '"q"', "x;y", "$$", "*")
_MOUNTS = [
    "type=bind",
    "src=/host/data",
    "dst=/data",
    "readonly",
    "type=volume",
    "src=cache",
    "dst=/cache",
    "type=device",
    "src=/dev/fuse",
]
_ENV = {"A": "1,2", "B": "x y $Z", "C": "it's", "LOGLEVEL": "DEBUG"}

CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    # dist.ddp
    ("dist.ddp", (), {"script": "train.py"}),
    ("dist.ddp", ("--lr", "0.1"), {"m": "pkg.trainer", "j": "2x4"}),
    ("dist.ddp", _ODD, {"script": "a/b/main.py", "j": "2:4x8", "rdzv_port": 1234}),
    ("dist.ddp", (), {"script": "t.py", "j": "3", "debug": True, "h": "gpu.large"}),
    ("dist.ddp", (), {"script": "t.py", "j": "2x1", "rdzv_backend": "static"}),
    ("dist.ddp", (), {"script": "t.py", "j": "1:1x1", "rdzv_backend": "etcd", "tee": 1}),
    ("dist.ddp", (), {"m": "x.y", "name": "exp/", "env": _ENV, "cpu": 8, "gpu": 2}),
    ("dist.ddp", (), {"script": "t.py", "name": "exp/run1", "memMB": 4096, "max_retries": 3}),
    ("dist.ddp", (), {"script": "t.py", "name": "/run2", "mounts": _MOUNTS}),
    ("dist.ddp", (), {"script": "t.py", "name": "justrun", "image": "my/img:1"}),
    ("dist.ddp", (), {"script": "dir/t.tar.py", "name": "a/b/c"}),  # split at the first /
    ("dist.ddp", (), {"script": "t.py", "j": "4x8", "h": "aws_p4d.24xlarge"}),
    ("dist.ddp", (), {"script": "t.py", "cpu": 0, "gpu": 0, "memMB": 0}),  # TorchX's defaults
    ("dist.ddp", (), {"script": "t.py", "j": "02x2"}),  # --nnodes as written
    # dist.spmd
    ("dist.spmd", (), {"script": "s.py"}),
    ("dist.spmd", ("--x", "a b"), {"m": "a.b", "j": "2", "h": "aws_p4d.24xlarge"}),
    ("dist.spmd", (), {"script": "s.py", "j": "2", "h": "gpu.medium", "env": _ENV}),
    ("dist.spmd", (), {"script": "s.py", "j": "2x4", "h": "gpu.medium", "debug": True}),
    ("dist.spmd", (), {"script": "s.py", "j": "02", "h": "aws_g5.12xlarge", "mounts": _MOUNTS}),
    ("dist.spmd", (), {"script": "s.py", "j": "2x3", "h": "cpu.small", "max_retries": 1}),
    ("dist.spmd", (), {"script": "s.py", "name": "e/r", "image": "img"}),
    # utils
    ("utils.echo", (), {}),
    ("utils.echo", (), {"msg": 'it\'s "quoted" $HOME', "image": "img", "num_replicas": 3}),
    ("utils.touch", (), {"file": "/tmp/x y"}),
    ("utils.sh", ("echo", "hi"), {}),
    ("utils.sh", _ODD, {"num_replicas": 2, "cpu": 4, "gpu": 1, "memMB": 2048}),
    ("utils.sh", ("true",), {"h": "gpu.small", "env": _ENV, "max_retries": 2}),
    ("utils.sh", ("true",), {"mounts": _MOUNTS, "image": "img", "env": {}}),
    ("utils.python", ("--lr", "1"), {"m": "pkg.main"}),
    ("utils.python", _ODD, {"c": "import sys; print(sys.argv)", "name": "p"}),
    ("utils.python", ("x",), {"script": "train.py", "h": "aws_p3.2xlarge", "num_replicas": 2}),
    ("utils.python", (), {"script": "t.py", "cpu": 3, "gpu": 1, "memMB": 100, "image": "i"}),
    ("utils.binary", ("-u",), {"entrypoint": "/bin/date"}),
    ("utils.binary", _ODD, {"entrypoint": "echo", "name": "b", "num_replicas": 2, "cpu": 2}),
    ("utils.binary", (), {"entrypoint": "true", "h": "cpu.small", "memMB": 64}),
    ("utils.copy", (), {"src": "s3://bucket/a b", "dst": "/tmp/c"}),
    ("utils.copy", (), {"src": "file:///a", "dst": "gs://b/c", "image": "img"}),
    ("utils.booth", (), {"x1": 1.0, "x2": 2.5}),
    ("utils.booth", (), {"x1": -3, "x2": 0.1, "trial_idx": 7, "tracker_base": "s3://b/t"}),
    # metrics and serve
    ("metrics.tensorboard", (), {"logdir": "s3://bucket/logs"}),
    (
        "metrics.tensorboard",
        (),
        {"logdir": "/l", "timeout": 5.0, "port": 7000, "start_on_file": "/s", "exit_on_file": "/e"},
    ),
    ("serve.torchserve", (), {"model_path": "s3://b/m.mar", "management_api": "http://t:8081"}),
    (
        "serve.torchserve",
        (),
        {
            "model_path": "/m.mar",
            "management_api": "http://t:8081",
            "image": "img",
            "params": {"initial_workers": "2", "synchronous": "true"},
            "dryrun": True,
        },
    ),
]


def test_calls_cover_every_builtin() -> None:
    assert {name for name, _, _ in CALLS} == set(_torchx_builtins())


@pytest.mark.parametrize(("name", "args", "kwargs"), CALLS, ids=lambda v: repr(v)[:40])
def test_same_call_builds_torchx_app(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    # Copies: TorchX's ddp and sh write into the env dict they are given.
    theirs = _torchx_builtins()[name](*args, **copy.deepcopy(kwargs))
    ours = _txd_fn(name)(*args, **copy.deepcopy(kwargs))
    _same(ours, theirs)


def test_loglevel_of_the_caller_is_taken_as_torchx_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGLEVEL", "INFO")
    for name, args, kwargs in CALLS:
        if name in ("dist.ddp", "utils.sh"):
            theirs = _torchx_builtins()[name](*args, **copy.deepcopy(kwargs))
            _same(_txd_fn(name)(*args, **copy.deepcopy(kwargs)), theirs)


# -- command lines ----------------------------------------------------------------------------

ARGVS: list[tuple[str, list[str]]] = [
    ("dist.ddp", ["--script", "main.py"]),
    ("dist.ddp", ["-j", "2x2", "--script", "main.py", "--", "--foo", "a b", "$HOME", "it's"]),
    ("dist.ddp", ["-j", "1:3x2", "-m", "pkg.train", "--rdzv_port", "4000", "--tee", "2"]),
    ("dist.ddp", ["--script", "t.py", "--env", "A=1;B=2", "--name", "exp/run"]),
    ("dist.ddp", ["--script", "t.py", "--env", "A=x,y,B=z", "--debug", "True"]),
    ("dist.ddp", ["--script", "t.py", "--env", "EMPTY='',Q=\"\"", "-h", "gpu.small"]),
    ("dist.ddp", ["--script", "t.py", "--mounts", "type=bind,src=/a,dst=/b,readonly"]),
    (
        "dist.ddp",
        ["--script", "t.py", "-j", "2x1", "--rdzv_backend", "static", "--max_retries", "2"],
    ),
    ("dist.ddp", ["--script", "t.py", "--cpu", "16", "--gpu", "2", "--memMB", "8192"]),
    ("dist.spmd", ["--script", "s.py"]),
    ("dist.spmd", ["-j", "2", "-h", "gpu.medium", "--script", "s.py", "--", "--n", "1"]),
    ("dist.spmd", ["-j", "3x2", "-h", "aws_p3.8xlarge", "-m", "a.b", "--env", "K=v"]),
    ("utils.echo", []),
    ("utils.echo", ["--msg", "hi there", "--num_replicas", "2"]),
    ("utils.touch", ["--file", "/tmp/x"]),
    ("utils.sh", ["echo", "$HOME", "a'b", "c d"]),
    ("utils.sh", ["--env", "A=1", "--h", "cpu.small", "--", "ls", "-l"]),
    ("utils.python", ["--c", "print(1)"]),
    ("utils.python", ["-m", "pkg", "--name", "n", "--", "--x", "1"]),
    ("utils.python", ["--script", "t.py", "--num_replicas", "3", "a", "b"]),
    ("utils.binary", ["--entrypoint", "date", "--", "-u"]),
    ("utils.binary", ["--entrypoint", "echo", "--name", "b", "x y"]),
    ("utils.copy", ["--src", "s3://a/b", "--dst", "/tmp/c"]),
    ("utils.booth", ["--x1", "1", "--x2", "2.5"]),
    ("utils.booth", ["--x1", "0", "--x2", "-1", "--trial_idx", "4", "--tracker_base", "/t"]),
    ("metrics.tensorboard", ["--logdir", "s3://l"]),
    ("metrics.tensorboard", ["--logdir", "l", "--timeout", "5", "--port", "7000"]),
    ("serve.torchserve", ["--model_path", "m.mar", "--management_api", "http://h:8081"]),
    (
        "serve.torchserve",
        ["--model_path", "m.mar", "--management_api", "http://h:8081", "--dryrun", "True"],
    ),
]


def test_argvs_cover_every_builtin() -> None:
    assert {name for name, _ in ARGVS} == set(_torchx_builtins())


@pytest.mark.parametrize(("name", "argv"), ARGVS, ids=lambda v: repr(v)[:40])
def test_same_command_line_builds_torchx_app(name: str, argv: list[str]) -> None:
    theirs = materialize_appdef(_torchx_builtins()[name], list(argv))
    _same(resolve(name, list(argv)), theirs)


def test_torchserve_params_from_the_command_line_work_where_torchx_fails() -> None:
    """TorchX declares params Dict[str, object] and cannot decode them from its command line;
    txd takes strings and builds what TorchX builds when called with those strings."""
    argv = ["--model_path", "m", "--management_api", "http://h", "--params", "a=1,b=x y"]
    with pytest.raises(TypeError):
        materialize_appdef(_torchx_builtins()["serve.torchserve"], list(argv))
    theirs = _torchx_builtins()["serve.torchserve"](
        model_path="m", management_api="http://h", params={"a": "1", "b": "x y"}
    )
    _same(resolve("serve.torchserve", argv), theirs)
