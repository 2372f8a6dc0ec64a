"""Components: builtins' AppDefs, signature -> CLI parsing, help, file components, mounts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from txd.client.components import ComponentError, ComponentHelp, builtins, parse_mounts, resolve
from txd.client.components.utils import DEFAULT_IMAGE
from txd.v1 import AppDef, BindMount, DeviceMount, Mount, Resource, VolumeMount


@pytest.fixture(autouse=True)
def _no_loglevel(monkeypatch: pytest.MonkeyPatch) -> None:
    # sh/ddp copy the caller's LOGLEVEL into the role env.
    monkeypatch.delenv("LOGLEVEL", raising=False)


def _help(spec: str, args: list[str], **kwargs: object) -> str:
    with pytest.raises(ComponentHelp) as info:
        resolve(spec, args, **kwargs)  # type: ignore[arg-type]
    return info.value.text


# -- discovery ----------------------------------------------------------------------------------


def test_builtins_lists_public_appdef_functions_sorted() -> None:
    assert builtins() == [
        "dist.ddp",
        "dist.spmd",
        "metrics.tensorboard",
        "serve.torchserve",
        "utils.binary",
        "utils.booth",
        "utils.copy",
        "utils.echo",
        "utils.python",
        "utils.sh",
        "utils.touch",
    ]


def test_unknown_builtin_suggests_closest_name() -> None:
    with pytest.raises(
        ComponentError, match=r"unknown component 'utils.ecoh'; did you mean utils\.echo\?"
    ):
        resolve("utils.ecoh", [])


def test_unknown_builtin_without_close_match_lists_builtins() -> None:
    with pytest.raises(ComponentError) as info:
        resolve("zzz", [])
    assert "did you mean" not in str(info.value)
    assert "dist.ddp" in str(info.value) and "path/to/file.py:function" in str(info.value)


def test_component_error_is_a_value_error() -> None:
    assert issubclass(ComponentError, ValueError)


# -- builtins -----------------------------------------------------------------------------------


def test_echo_defaults() -> None:
    app = resolve("utils.echo", [])
    assert app.name == "echo"
    (role,) = app.roles
    assert role.name == "echo"
    assert role.image == DEFAULT_IMAGE == "ghcr.io/pytorch/torchx:0.7.0"
    assert role.entrypoint == "echo"
    assert list(role.args) == ["hello world"]
    assert role.num_replicas == 1
    assert role.resource == Resource(cpu=1, mem_mb=1024)


def test_echo_args() -> None:
    app = resolve("utils.echo", ["--msg", "hi there", "--num_replicas=3", "--image", "img"])
    role = app.roles[0]
    assert list(role.args) == ["hi there"]
    assert role.num_replicas == 3
    assert role.image == "img"


def test_touch_requires_file() -> None:
    with pytest.raises(
        ComponentError, match=r"^missing required argument --file for component utils.touch$"
    ):
        resolve("utils.touch", [])
    role = resolve("utils.touch", ["--file", "/tmp/x"]).roles[0]
    assert (role.name, role.entrypoint, list(role.args)) == ("touch", "touch", ["/tmp/x"])


def test_sh_joins_args_for_sh_c() -> None:
    app = resolve("utils.sh", ["--", "echo", "a b", "$HOME"])
    role = app.roles[0]
    assert app.name == "sh" and role.name == "sh"
    assert role.entrypoint == "sh"
    assert list(role.args) == ["-c", "echo 'a b' '$HOME'"]
    assert dict(role.env) == {"LOGLEVEL": "WARNING"}
    assert role.resource == Resource(cpu=1, gpu=0, mem_mb=1024)
    assert role.max_retries == 0
    assert list(role.mounts) == []


def test_sh_without_dashdash_starts_args_at_first_positional() -> None:
    role = resolve("utils.sh", ["--cpu", "4", "echo", "--cpu", "x"]).roles[0]
    assert list(role.args) == ["-c", "echo --cpu x"]
    assert role.resource.cpu == 4


def test_sh_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGLEVEL", "INFO")
    role = resolve(
        "utils.sh",
        [
            "--env",
            "A=1,B=x,y",
            "--max_retries",
            "2",
            "--mounts",
            "type=bind,src=/a,dst=/b",
            "-h",
            "gpu.small",
            "--gpu",
            "3",
            "--",
            "true",
        ],
    ).roles[0]
    assert dict(role.env) == {"A": "1", "B": "x,y", "LOGLEVEL": "INFO"}
    assert role.max_retries == 2
    assert list(role.mounts) == [Mount(bind=BindMount(src_path="/a", dst_path="/b"))]
    # a named resource is resolved by the daemon: raw numbers are not sent along
    assert role.resource == Resource(named="gpu.small")


def test_sh_env_keeps_explicit_loglevel() -> None:
    role = resolve("utils.sh", ["--env", "LOGLEVEL=DEBUG", "--", "true"]).roles[0]
    assert role.env["LOGLEVEL"] == "DEBUG"


def test_sh_with_entrypoint_passes_args_unchanged() -> None:
    role = resolve("utils.sh", ["--entrypoint", "bash", "--", "-c", "echo 'x y'"]).roles[0]
    assert role.entrypoint == "bash"
    assert list(role.args) == ["-c", "echo 'x y'"]


def test_python_variants() -> None:
    app = resolve("utils.python", ["--m", "pkg.main", "--", "--lr", "1"])
    role = app.roles[0]
    assert (app.name, role.name) == ("torchx_utils_python", "python")  # TorchX's role name
    assert role.entrypoint == "python"
    assert list(role.args) == ["-m", "pkg.main", "--lr", "1"]
    assert dict(role.env) == {"HYDRA_MAIN_MODULE": "pkg.main"}
    app = resolve("utils.python", ["-c", "print(1)", "--name", "p"])
    role = app.roles[0]
    assert (app.name, role.name, list(role.args), dict(role.env)) == (
        "p",
        "python",
        ["-c", "print(1)"],
        {},
    )
    role = resolve("utils.python", ["--script", "train.py", "x"]).roles[0]
    assert list(role.args) == ["train.py", "x"]
    assert role.resource == Resource(cpu=1, gpu=0, mem_mb=1024)


@pytest.mark.parametrize("args", [[], ["--m", "a", "--script", "b.py"]])
def test_python_needs_exactly_one_program(args: list[str]) -> None:
    with pytest.raises(ComponentError, match=r"utils.python: exactly one of --m, --c or --script"):
        resolve("utils.python", args)


def test_binary() -> None:
    with pytest.raises(ComponentError, match="missing required argument --entrypoint"):
        resolve("utils.binary", [])
    app = resolve("utils.binary", ["--entrypoint", "/bin/date", "--memMB", "64", "--", "-u"])
    role = app.roles[0]
    assert (app.name, role.name) == ("torchx_utils_binary", "binary")  # TorchX's role name
    assert (role.entrypoint, list(role.args), role.image) == ("/bin/date", ["-u"], "")
    assert role.resource == Resource(cpu=1, mem_mb=64)


def test_ddp_single_node() -> None:
    app = resolve("dist.ddp", ["--script", "path/train.py", "--", "--lr", "0.1 x"])
    (role,) = app.roles
    assert app.name == "train" and role.name == "train"
    assert role.entrypoint == "bash"
    assert list(role.args) == [
        "-c",
        # TorchX 0.7's line: the id quoted, no --node_rank (c10d ranks at the rendezvous)
        "torchrun --rdzv_backend c10d --rdzv_endpoint localhost:0 --rdzv_id '${app_id}' "
        "--nnodes 1 --nproc_per_node 2 --tee 3 --role '' path/train.py --lr '0.1 x'",
    ]
    assert role.num_replicas == 1 and role.min_replicas == 1
    assert dict(role.port_map) == {"c10d": 29500}
    assert role.resource == Resource(cpu=2, gpu=0, mem_mb=1024)
    assert dict(role.env) == {
        "LOGLEVEL": "WARNING",
        "TORCHX_TRACKING_EXPERIMENT_NAME": "default-experiment",
    }


def test_ddp_multi_node_elastic() -> None:
    app = resolve(
        "dist.ddp",
        ["-m", "pkg.trainer", "-j", "2:4x8", "--rdzv_port", "1234", "--name", "exp/run1"],
    )
    role = app.roles[0]
    assert app.name == "run1" and role.name == "trainer"
    assert role.num_replicas == 4 and role.min_replicas == 2
    cmd = role.args[1]
    # `$$` is one `$` once the scheduler has substituted the macros
    assert "--rdzv_endpoint $${${rank0_env}:=localhost}:1234 " in cmd
    assert "--nnodes 2:4 --nproc_per_node 8 " in cmd
    assert "--node_rank" not in cmd  # elastic: ranks come from the rendezvous
    assert cmd.endswith("-m pkg.trainer")
    assert dict(role.port_map) == {"c10d": 1234}
    assert role.env["TORCHX_TRACKING_EXPERIMENT_NAME"] == "exp"
    assert "TORCHX_TRACKING_RUN_NAME" not in role.env  # TorchX sets no such variable


def test_ddp_options() -> None:
    role = resolve(
        "dist.ddp",
        [
            "--script",
            "t.py",
            "-j3",
            "--debug",
            "TRUE",
            "--rdzv_conf",
            "timeout=60",
            "--h",
            "gpu.large",
            "--max_retries",
            "1",
            "--mounts",
            "type=volume,src=pvc,dst=/data,readonly",
        ],
    ).roles[0]
    assert role.num_replicas == 1
    assert "--rdzv_conf timeout=60 " in role.args[1]
    assert "--nproc_per_node 3 " in role.args[1]
    assert role.env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    assert role.env["CUDA_LAUNCH_BLOCKING"] == "1"
    assert role.resource == Resource(named="gpu.large")
    assert role.max_retries == 1
    assert list(role.mounts) == [
        Mount(volume=VolumeMount(src="pvc", dst_path="/data", read_only=True))
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "exactly one of --script and --m"),
        (["--script", "a.py", "-m", "b"], "exactly one of --script and --m"),
        (["--script", "a.py", "-j", "2xx"], r"bad -j '2xx'"),
        (["--script", "a.py", "-j", "3:2x1"], r"bad -j '3:2x1'"),
        (["--script", "a.py", "-j", "0"], r"bad -j '0'"),
    ],
)
def test_ddp_errors(args: list[str], message: str) -> None:
    with pytest.raises(ComponentError, match=r"^component dist.ddp: " + message):
        resolve("dist.ddp", args)


def test_spmd_infers_procs_from_gpus() -> None:
    app = resolve("dist.spmd", ["--script", "s.py", "-j", "2", "-h", "gpu.medium"])
    role = app.roles[0]
    assert role.num_replicas == 2
    assert "--nnodes 2 --nproc_per_node 2 " in role.args[1]
    assert role.resource == Resource(named="gpu.medium")
    # the default: one gpu.small node, one process
    role = resolve("dist.spmd", ["--script", "s.py"]).roles[0]
    assert "--nnodes 1 --nproc_per_node 1 " in role.args[1]
    assert role.resource == Resource(named="gpu.small")


def test_spmd_explicit_procs_and_cpu_host_errors() -> None:
    role = resolve("dist.spmd", ["-m", "a.b", "-j", "1:2x3", "-h", "cpu.small"]).roles[0]
    assert (role.min_replicas, role.num_replicas) == (1, 2)
    assert "--nproc_per_node 3 " in role.args[1]
    with pytest.raises(ComponentError, match=r"'cpu\.small' has no GPUs"):
        resolve("dist.spmd", ["-m", "a.b", "-j", "2", "-h", "cpu.small"])


def test_spmd_takes_gpus_per_host_from_the_named_resources() -> None:
    """Every named resource the daemon knows (txd.resources), AWS shapes included."""
    role = resolve("dist.spmd", ["-m", "a.b", "-j", "2", "-h", "aws_g5.12xlarge"]).roles[0]
    assert "--nnodes 2 --nproc_per_node 4 " in role.args[1]
    with pytest.raises(ComponentError, match=r"'aws_t3\.medium' has no GPUs"):
        resolve("dist.spmd", ["-m", "a.b", "-j", "2", "-h", "aws_t3.medium"])
    with pytest.raises(ComponentError, match=r"'gpu\.huge' is not known"):
        resolve("dist.spmd", ["-m", "a.b", "-j", "2", "-h", "gpu.huge"])


# -- argument parsing ---------------------------------------------------------------------------

_KITCHEN_SINK = '''
from __future__ import annotations

from txd.v1 import AppDef, Role

SEEN = {}


def sink(
    *rest: str,
    name: str,
    count: int = 1,
    ratio: float = 0.5,
    flag: bool = False,
    maybe: Optional[int] = None,
    tags: List[str] | None = None,
    nums: list[int] = [],
    env: Dict[str, str] | None = None,
    ports: dict[str, int] | None = None,
    x: str = "ex",
) -> AppDef:
    """A component exercising every supported annotation.

    It has a longer description too.

    Args:
        rest: trailing words
        name: the name, which needs a rather long explanation that goes on and on
            over more than one line
        count: how many
        flag: a flag

    Returns:
        the app
    """
    SEEN.update(
        rest=rest, name=name, count=count, ratio=ratio, flag=flag, maybe=maybe, tags=tags,
        nums=nums, env=env, ports=ports, x=x,
    )
    return AppDef(name=name, roles=[Role(name="r", entrypoint="true")])


def not_app() -> AppDef:
    return 42


def bad_annotation(a: set[str]) -> AppDef:
    return AppDef(name="a")


def kwargs_too(**kw: str) -> AppDef:
    return AppDef(name="a")


def no_annotation(a) -> AppDef:
    return AppDef(name="a")


def positional(a: str, b: int = 2, *more: int) -> AppDef:
    SEEN.update(a=a, b=b, more=more)
    return AppDef(name="p")


def raises_value_error(a: str = "x") -> AppDef:
    raise ValueError("a is not acceptable")


def with_help(help: str = "x") -> AppDef:
    return AppDef(name="a")

'''


@pytest.fixture
def sink_file(tmp_path: Path) -> Path:
    path = tmp_path / "comp.py"
    path.write_text(_KITCHEN_SINK)
    return path


def _sink(path: Path, args: list[str], **kwargs: object) -> dict[str, object]:
    resolve(f"{path}:sink", args, **kwargs)  # type: ignore[arg-type]
    module = sys.modules["_txd_component_comp"]
    return dict(module.SEEN)


def test_file_component_defaults(sink_file: Path) -> None:
    seen = _sink(sink_file, ["--name", "n"])
    assert seen == {
        "rest": (),
        "name": "n",
        "count": 1,
        "ratio": 0.5,
        "flag": False,
        "maybe": None,
        "tags": None,
        "nums": [],
        "env": None,
        "ports": None,
        "x": "ex",
    }


def test_file_component_all_types(sink_file: Path) -> None:
    seen = _sink(
        sink_file,
        [
            "--name=n",
            "--count",
            "3",
            "--ratio",
            "2.5",
            "--flag",
            "True",
            "--maybe",
            "7",
            "--tags",
            "a, b,c",
            "--nums",
            "1,2",
            "--env",
            "K=V,K2=a=b",
            "--ports",
            "http=80",
            "-x",
            "why",
            "--",
            "--not-an-option",
            "z",
        ],
    )
    assert seen["rest"] == ("--not-an-option", "z")
    assert seen["count"] == 3 and seen["ratio"] == 2.5 and seen["flag"] is True
    assert seen["maybe"] == 7
    assert seen["tags"] == ["a", "b", "c"]
    assert seen["nums"] == [1, 2]
    assert seen["env"] == {"K": "V", "K2": "a=b"}
    assert seen["ports"] == {"http": 80}
    assert seen["x"] == "why"


def test_single_letter_forms(sink_file: Path) -> None:
    assert _sink(sink_file, ["--name", "n", "-xglued"])["x"] == "glued"
    assert _sink(sink_file, ["--name", "n", "--x", "long"])["x"] == "long"
    assert _sink(sink_file, ["--name", "n", "-x=eq"])["x"] == "eq"
    assert _sink(sink_file, ["--name", "n", "-xk=v"])["x"] == "k=v"
    assert _sink(sink_file, ["--name", "n", "--x=k=v"])["x"] == "k=v"


def test_bool_and_optional_values(sink_file: Path) -> None:
    assert _sink(sink_file, ["--name", "n", "--flag", "false"])["flag"] is False
    assert _sink(sink_file, ["--name", "n", "--maybe", "None"])["maybe"] is None
    assert _sink(sink_file, ["--name", "n", "--nums", ""])["nums"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--flag", "yes"], r"bad value 'yes' for --flag of component .*: expected true or false"),
        (["--count", "1.5"], r"bad value '1.5' for --count .*: expected an integer"),
        (["--ratio", "x"], r"bad value 'x' for --ratio .*: expected a number"),
        (["--nums", "1,x"], r"bad value '1,x' for --nums .*: 'x': expected an integer"),
        (["--env", "novalue"], r"bad value 'novalue' for --env .*KEY=VALUE"),
        (["--ports", "a=b"], r"bad value 'a=b' for --ports .*'b': expected an integer"),
        (["--nmae", "n"], r"unknown argument --nmae for component .* \(did you mean --name\?\)"),
        # argparse's own wording (the component parser is argparse, as TorchX's is)
        (["--count"], r"argument --count of component .*: expected one argument"),
        (["--count", "1", "--count", "2"], r"argument --count of component .*: given more than"),
    ],
)
def test_bad_values(sink_file: Path, args: list[str], message: str) -> None:
    with pytest.raises(ComponentError, match=message):
        _sink(sink_file, ["--name", "n", *args])


def test_missing_required_file_component(sink_file: Path) -> None:
    with pytest.raises(ComponentError, match=r"^missing required argument --name for component "):
        _sink(sink_file, [])


def test_defaults_override_declared_and_satisfy_required(sink_file: Path) -> None:
    defaults = {"name": "cfg", "count": "9", "tags": "p,q", "rest": "one 'two three'"}
    seen = _sink(sink_file, [], defaults=defaults)
    assert seen["name"] == "cfg" and seen["count"] == 9 and seen["tags"] == ["p", "q"]
    assert seen["rest"] == ("one", "two three")
    # the command line still wins over the defaults
    seen = _sink(sink_file, ["--count", "2", "--", "cli"], defaults=defaults)
    assert seen["count"] == 2 and seen["rest"] == ("cli",)


def test_bad_and_unknown_defaults(sink_file: Path) -> None:
    with pytest.raises(ComponentError, match=r"bad configured default value 'x' for --count"):
        _sink(sink_file, ["--name", "n"], defaults={"count": "x"})
    with pytest.raises(ComponentError, match=r"unknown argument\(s\): bogus"):
        _sink(sink_file, ["--name", "n"], defaults={"bogus": "1"})


def test_positional_parameters_and_int_varargs(sink_file: Path) -> None:
    resolve(f"{sink_file}:positional", ["--a", "A", "--", "1", "2"])
    assert sys.modules["_txd_component_comp"].SEEN == {"a": "A", "b": 2, "more": (1, 2)}
    with pytest.raises(ComponentError, match=r"bad positional argument 'x'.*expected an integer"):
        resolve(f"{sink_file}:positional", ["--a", "A", "x"])


def test_positional_without_varargs_is_rejected() -> None:
    with pytest.raises(
        ComponentError, match=r"utils.echo takes no positional arguments \(got 'x'\)"
    ):
        resolve("utils.echo", ["x"])


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("not_app", r"component .*:not_app returned int, expected an AppDef"),
        ("bad_annotation", r"parameter 'a' has unsupported annotation 'set\[str\]'"),
        ("kwargs_too", r"\*\*kw is not supported"),
        ("no_annotation", r"parameter 'a' has no type annotation"),
        ("raises_value_error", r"component .*:raises_value_error: a is not acceptable"),
        ("with_help", r"cannot be named 'help'"),
        ("snik", r"function 'snik' not found in .*comp.py; did you mean sink\?"),
        ("SEEN", r"'SEEN' in .* is not a function"),
    ],
)
def test_file_component_errors(sink_file: Path, function: str, message: str) -> None:
    with pytest.raises(ComponentError, match=message):
        resolve(f"{sink_file}:{function}", [])


def test_relative_file_and_load_errors(
    tmp_path: Path, sink_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve("comp.py:sink", ["--name", "rel"]).name == "rel"
    with pytest.raises(ComponentError, match=r"^component file not found: missing.py$"):
        resolve("missing.py:f", [])
    with pytest.raises(ComponentError, match=r"missing function name"):
        resolve("comp.py", [])
    (tmp_path / "broken.py").write_text("x = 1\ndef f(:\n")
    with pytest.raises(ComponentError, match=r"^broken.py:2: syntax error"):
        resolve("broken.py:f", [])
    (tmp_path / "boom.py").write_text("raise RuntimeError('nope')\n")
    with pytest.raises(ComponentError, match=r"failed to load .*boom.py: RuntimeError: nope"):
        resolve("boom.py:f", [])
    (tmp_path / "undefined.py").write_text(
        "from __future__ import annotations\n"
        "from txd.v1 import AppDef\n"
        "def f(a: Nope) -> AppDef:\n    return AppDef()\n"
    )
    with pytest.raises(ComponentError, match=r"cannot evaluate annotation 'Nope' of parameter 'a'"):
        resolve("undefined.py:f", [])


def test_file_component_sees_its_file(tmp_path: Path) -> None:
    path = tmp_path / "where.py"
    path.write_text(
        "import os\nfrom txd.v1 import AppDef\n"
        "def f() -> AppDef:\n    return AppDef(name=os.path.basename(__file__)[:-3])\n"
    )
    assert resolve(f"{path}:f", []).name == "where"
    assert not (tmp_path / "__pycache__").exists()  # no bytecode left beside the user's file


# -- help ---------------------------------------------------------------------------------------


def test_help_text(sink_file: Path) -> None:
    text = _help(f"{sink_file}:sink", ["--help"], prog="txctl run -s local_cwd")
    usage = " ".join(text.split("\n\n")[0].split())
    assert usage.startswith(
        f"usage: txctl run -s local_cwd {sink_file}:sink --name STR [--count INT]"
    )
    assert usage.endswith("[-x STR] [rest ...]")
    assert "A component exercising every supported annotation.\n\nIt has a longer" in text
    assert "Returns" not in text and "the app" not in text
    # argparse's listing: one line per option, its help wrapped beside it
    lines = text[text.index("options:") :].splitlines()
    name_line = next(i for i, line in enumerate(lines) if line.strip().startswith("--name STR"))
    assert "the name, which needs" in lines[name_line]
    assert "(required)" in " ".join(lines[name_line : name_line + 3])
    assert any("--count INT" in ln and "how many (default: 1)" in ln for ln in lines)
    assert any("--flag BOOL" in ln and "a flag (default: false)" in ln for ln in lines)
    assert any("-x STR, --x STR" in ln and "(default: ex)" in ln for ln in lines)
    assert any("--env STR=STR,..." in ln for ln in lines)
    assert re.search(r"^  rest +trailing words$", text, re.M)
    assert "--help" not in text  # taken, but not listed: the options are the component's


def test_help_shows_config_defaults_and_wins_over_errors(sink_file: Path) -> None:
    # --help works even though --name is missing and --count is malformed
    text = _help(f"{sink_file}:sink", ["--count", "x", "--help"], defaults={"name": "cfg"})
    flat = " ".join(text.split())
    assert "(default: cfg, from config)" in flat
    assert "--name STR (required)" not in flat
    assert "[--name STR]" in flat


_DOCSTRINGS = {
    "google": """Greets someone.

    Says hello, repeatedly.

    Args:
        name: who to greet, which can take
            more than one line
        times (int): how many greetings
        *words: what else to say

    Returns:
        the app
    """,
    "numpy": """Greets someone.

    Says hello, repeatedly.

    Parameters
    ----------
    name : str
        who to greet, which can take
        more than one line
    times : int, optional
        how many greetings
    *words : str
        what else to say

    Returns
    -------
    AppDef
        the app
    """,
    "rest": """Greets someone.

    Says hello, repeatedly.

    :param name: who to greet, which can take
        more than one line
    :param int times: how many greetings
    :param words: what else to say
    :returns: the app
    """,
}


@pytest.mark.parametrize("style", sorted(_DOCSTRINGS))
def test_help_from_each_docstring_style(tmp_path: Path, style: str) -> None:
    doc = textwrap.indent(_DOCSTRINGS[style], "    ").strip()
    path = tmp_path / f"greet_{style}.py"
    path.write_text(
        "from txd.v1 import AppDef\n\n"
        "def greet(*words: str, name: str, times: int = 2) -> AppDef:\n"
        f'    """{doc}\n    """\n'
        "    return AppDef(name='greet')\n"
    )
    text = _help(f"{path}:greet", ["--help"])
    flat = " ".join(text.split())
    assert "Greets someone.\n\nSays hello, repeatedly." in text
    assert "--name STR who to greet, which can take more than one line (required)" in flat
    assert "--times INT how many greetings (default: 2)" in flat
    assert "words what else to say" in flat
    assert "the app" not in text and "Returns" not in text


def test_malformed_docstring_still_gives_help(tmp_path: Path) -> None:
    path = tmp_path / "odd.py"
    path.write_text(
        "from txd.v1 import AppDef\n\n"
        "def odd(n: int = 1) -> AppDef:\n"
        '    """Odd.\n\n    :param: a field list without a name\n    """\n'
        "    return AppDef(name='odd')\n"
    )
    text = _help(f"{path}:odd", ["--help"])
    assert "Odd." in text and "--n INT" in text


def test_dash_h_is_help_only_without_a_parameter_h() -> None:
    assert "usage: txctl run utils.echo" in _help("utils.echo", ["-h"])
    # utils.sh has a parameter h (named resource): -h takes a value there
    assert resolve("utils.sh", ["-h", "gpu.small", "--", "true"]).roles[0].resource.named
    assert "-h STR, --h STR" in _help("utils.sh", ["--help"])


def test_help_after_varargs_goes_to_the_program() -> None:
    role = resolve("utils.sh", ["--", "python", "--help"]).roles[0]
    assert list(role.args) == ["-c", "python --help"]


def test_every_builtin_documents_every_argument() -> None:
    from txd.client.components._finder import _builtin_functions
    from txd.client.components._parser import Component

    for name, fn in _builtin_functions().items():
        assert _help(name, ["--help"]).startswith(f"usage: txctl run {name}")
        component = Component(fn, name)
        params = [*component.params, *([component.varargs] if component.varargs else [])]
        assert [p.name for p in params if not p.help] == [], name


# -- mounts -------------------------------------------------------------------------------------


def test_parse_mounts_full_example() -> None:
    # what `--mounts type=bind,src=~/data,...` yields once split on commas
    tokens = [
        *("type=bind", "src=~/data", "dst=/data", "readonly"),
        *("type=volume", "source=efs-1", "destination=/efs", "read_only=false"),
        *("type=device", "src=/dev/fuse"),
        *("type=device", "src=/dev/nvidia0", "target=/dev/gpu", "perm=rw"),
    ]
    assert parse_mounts(tokens) == [
        Mount(
            bind=BindMount(src_path=os.path.expanduser("~/data"), dst_path="/data", read_only=True)
        ),
        Mount(volume=VolumeMount(src="efs-1", dst_path="/efs", read_only=False)),
        Mount(device=DeviceMount(src_path="/dev/fuse", dst_path="/dev/fuse", permissions="rwm")),
        Mount(device=DeviceMount(src_path="/dev/nvidia0", dst_path="/dev/gpu", permissions="rw")),
    ]
    assert parse_mounts([]) == []
    assert parse_mounts(["type=bind", "src=/a", "dst=/b", ""]) == [
        Mount(bind=BindMount(src_path="/a", dst_path="/b"))
    ]


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (["src=/a", "type=bind"], r"comes before any type="),
        (["type=bind", "colour=red"], r"unknown mount option 'colour=red' \(valid: type, src"),
        (["type=nfs", "src=a", "dst=b"], r"mount 1: unknown type 'nfs'"),
        (["type=bind", "dst=/b"], r"mount 1 \(bind\): src is required"),
        (["type=bind", "src=/a", "dst=/b", "type=volume", "src=v"], r"mount 2 \(volume\): dst"),
        (["type=device", "src=/dev/x", "perm=rx"], r"perm 'rx' must be a combination of r, w"),
        (["type=device", "src=/dev/x", "readonly"], r"readonly does not apply to devices"),
        (["type=bind", "src=/a", "dst=/b", "perm=r"], r"perm only applies to device mounts"),
        (["type=bind", "src=/a", "src=/c", "dst=/b"], r"mount 1: src given more than once"),
        (["type=bind", "src=/a", "dst=/b", "readonly=maybe"], r"readonly takes true or false"),
    ],
)
def test_parse_mounts_errors(tokens: list[str], message: str) -> None:
    with pytest.raises(ComponentError, match=message):
        parse_mounts(tokens)


def test_bad_mounts_through_a_component_name_the_component() -> None:
    with pytest.raises(ComponentError, match=r"^component utils.sh: mount 1 \(bind\): dst"):
        resolve("utils.sh", ["--mounts", "type=bind,src=/a", "--", "true"])


# -- import hygiene -----------------------------------------------------------------------------


def test_client_side_modules_do_not_pull_in_grpc_or_the_daemon() -> None:
    code = textwrap.dedent(
        """
        import sys
        import txd.client
        client_imports_grpc = "grpc" in sys.modules
        import txd.client.components, txd.client.config
        from txd.client.components import builtins
        builtins()
        heavy = [m for m in ("txd.daemon", "txd.schedulers") if m in sys.modules]
        if not client_imports_grpc and "grpc" in sys.modules:
            heavy.append("grpc")
        assert not heavy, heavy
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_torchx_and_docstring_parser_load_only_when_needed() -> None:
    # The docstring is read for help texts only (`txctl run` starts about 15 ms sooner), and
    # difflib loads for an error's suggestions only.
    code = textwrap.dedent(
        """
        import sys
        import txd.client.cli, txd.client._async, txd.client._sync, txd.client.runner
        from txd.client import AppState, AsyncClient, Client, components
        assert "docstring_parser" not in sys.modules and "torchx" not in sys.modules
        components.resolve("utils.echo", ["--msg", "hi"])
        assert "docstring_parser" not in sys.modules and "torchx" not in sys.modules
        assert "difflib" not in sys.modules  # only an unknown name's error wants it
        try:
            components.resolve("utils.echo", ["--msg", "hi", "--help"])
        except components.ComponentHelp as h:
            assert "Prints a message to stdout" in h.text, h.text
            assert "message to print (default: hello world)" in h.text, h.text
        else:
            raise AssertionError("no help")
        assert "docstring_parser" in sys.modules and "torchx" not in sys.modules
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_returned_value_is_a_real_appdef() -> None:
    assert isinstance(resolve("utils.echo", []), AppDef)
