"""TorchX users switch without rewriting: TorchX component files run with `txctl run`, the
client takes a torchx.specs.AppDef, and without torchx installed one line says to install it.
Every job goes through a real daemon; what it recorded is read back with `describe --json`."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from txd import install
from txd_testing import first_line, no_traceback, run_python

specs = pytest.importorskip("torchx.specs")

# The component of the seed page "Basic Concepts" (shared/seeds/004_...), verbatim.
SEED_DDP = textwrap.dedent("""
    import torchx.specs as specs

    def ddp(name: str, nnodes: int, image: str, entrypoint: str, *args: str) -> specs.AppDef:
        return specs.AppDef(
            name=name,
            roles=[
                specs.Role(
                    name="trainer",
                    entrypoint=entrypoint,
                    image=image,
                    resource=specs.Resource(cpu=4, gpu=1, memMB=1024),
                    args=list(args),
                    num_replicas=nnodes,
                )
            ],
        )
""")

# Shaped like TorchX's own builtins: `from torchx import specs`, typing annotations, two roles,
# every kind of mount, named resources both ways, and macros in args and env.
TRAINER_PS = textwrap.dedent('''
    from typing import Dict, Optional

    from torchx import specs


    def trainer_ps(
        image: str = "/tmp",
        workers: int = 2,
        data: str = "/data",
        env: Optional[Dict[str, str]] = None,
    ) -> specs.AppDef:
        """A trainer and a parameter server.

        Args:
            image: image for both roles
            workers: trainer replicas
            data: where the data volume is mounted
            env: extra environment for the trainer
        """
        trainer = specs.Role(
            name="trainer",
            image=image,
            entrypoint="sh",
            args=[
                "-c",
                f"echo trainer {specs.macros.replica_id} of {specs.macros.app_id} "
                f"in {specs.macros.img_root}",
            ],
            env={"RANK0": specs.macros.rank0_env, **(env or {})},
            num_replicas=workers,
            min_replicas=1,
            max_retries=2,
            retry_policy=specs.RetryPolicy.REPLICA,
            resource=specs.resource(h="gpu.small"),
            port_map={"c10d": 29500},
            metadata={"team": "ml", "priority": 3},
            mounts=[
                specs.BindMount(src_path="/tmp", dst_path="/scratch", read_only=True),
                specs.VolumeMount(src="datasets", dst_path=data),
                specs.DeviceMount(src_path="/dev/null", dst_path="/dev/null", permissions="rw"),
            ],
        )
        ps = specs.Role(
            name="ps",
            image=image,
            entrypoint="echo",
            args=["ps", specs.macros.app_id],
            resource=specs.named_resources["aws_p4d.24xlarge"],
        )
        return specs.AppDef(name="trainer_ps", roles=[trainer, ps], metadata={"owner": "me"})


    def hot_spare() -> specs.AppDef:
        role = specs.Role(name="r", image="/tmp", entrypoint="true",
                          retry_policy=specs.RetryPolicy.HOT_SPARE)
        return specs.AppDef(name="hs", roles=[role])
''')

# A Python in which torchx is not installed: a `None` entry in sys.modules is the documented
# way to make `import torchx...` fail with ModuleNotFoundError, as a missing package does.
WITHOUT_TORCHX = "import sys\nsys.modules['torchx'] = None\n"


@pytest.fixture
def comp(workdir: Path) -> Path:
    (workdir / "seed.py").write_text(SEED_DDP)
    path = workdir / "comp.py"
    path.write_text(TRAINER_PS)
    return path


def _app_id(handle: str) -> str:
    return handle.rsplit("/", 1)[1]


def _describe(txctl: Any, handle: str) -> dict[str, Any]:
    return json.loads(txctl("describe", "--json", handle, check=0).stdout)["app"]


def _own_env(role: dict[str, Any]) -> dict[str, str]:
    # local_cwd records the TORCHX_JOB_ID it sets for every replica beside the role's own env
    return {k: v for k, v in role["env"].items() if k != "TORCHX_JOB_ID"}


def test_seed_component_runs_unchanged(txctl: Any, comp: Path) -> None:
    proc = txctl(
        "run", "--wait", "seed.py:ddp", "--name", "seedddp", "--nnodes", "2", "--image", "/tmp",
        "--entrypoint", "echo", "hello", "world", check=0,
    )  # fmt: skip
    handle = first_line(proc.stdout)
    assert "SUCCEEDED" in proc.stdout
    logs = txctl("logs", handle, check=0).stdout.splitlines()
    assert sorted(logs) == ["trainer/0 hello world", "trainer/1 hello world"]
    (role,) = _describe(txctl, handle)["roles"]
    assert (role["name"], role["entrypoint"], role["image"]) == ("trainer", "echo", "/tmp")
    assert (role["args"], role["num_replicas"]) == (["hello", "world"], 2)
    assert role["resource"] == {
        "cpu": 4, "gpu": 1, "mem_mb": "1024", "capabilities": {}, "devices": {}, "named": "",
    }  # fmt: skip
    assert "min_replicas" not in role  # None in TorchX: unset


def test_torchx_component_field_by_field(txctl: Any, comp: Path, workdir: Path) -> None:
    proc = txctl("run", "--wait", "comp.py:trainer_ps", "--env", "A=1,B=x,y", check=0)
    handle = first_line(proc.stdout)
    app_id = _app_id(handle)
    assert "SUCCEEDED" in proc.stdout
    # the macros are txd's: substituted per replica when the job runs...
    logs = sorted(txctl("logs", handle, check=0).stdout.splitlines())
    assert logs == [
        f"ps/0 ps {app_id}",
        f"trainer/0 trainer 0 of {app_id} in {workdir}",
        f"trainer/1 trainer 1 of {app_id} in {workdir}",
    ]
    # ...and recorded as written
    app = _describe(txctl, handle)
    assert app["name"] == "trainer_ps"
    assert app["metadata"] == {"owner": "me"}
    trainer, ps = app["roles"]
    assert {k: v for k, v in trainer.items() if k not in ("env", "resource")} == {
        "name": "trainer",
        "image": "/tmp",
        "entrypoint": "sh",
        "args": ["-c", "echo trainer ${replica_id} of ${app_id} in ${img_root}"],
        "num_replicas": 2,
        "min_replicas": 1,
        "max_retries": 2,
        "retry_policy": "REPLICA",
        "port_map": {"c10d": 29500},
        "metadata": {"team": "ml", "priority": "3"},  # TorchX allows any value: sent as JSON
        "mounts": [
            {"bind": {"src_path": "/tmp", "dst_path": "/scratch", "read_only": True}},
            {"volume": {"src": "datasets", "dst_path": "/data", "read_only": False}},
            {"device": {"src_path": "/dev/null", "dst_path": "/dev/null", "permissions": "rw"}},
        ],
    }
    assert _own_env(trainer) == {"RANK0": "${rank0_env}", "A": "1", "B": "x,y"}
    # specs.resource(h="gpu.small"): TorchX's numbers for it
    assert trainer["resource"] == {
        "cpu": 8, "gpu": 1, "mem_mb": "32768", "capabilities": {}, "devices": {}, "named": "",
    }  # fmt: skip
    assert (ps["name"], ps["args"], ps["num_replicas"]) == ("ps", ["ps", "${app_id}"], 1)
    assert (ps["retry_policy"], ps["max_retries"], ps["mounts"]) == ("APPLICATION", 0, [])
    # specs.named_resources["aws_p4d.24xlarge"], capabilities and devices included
    want = specs.named_resources["aws_p4d.24xlarge"]
    assert ps["resource"] == {
        "cpu": want.cpu,
        "gpu": want.gpu,
        "mem_mb": str(want.memMB),
        "capabilities": want.capabilities,
        "devices": want.devices,
        "named": "",
    }
    assert want.capabilities and want.devices


def test_torchx_builtin_component_files_run_unchanged(txctl: Any, workdir: Path) -> None:
    """TorchX's own component files, from the installed torchx package, as they are."""
    import torchx.components

    lib = Path(torchx.components.__file__).parent
    proc = txctl("run", "--wait", f"{lib}/utils.py:echo", "--msg", "hi there", check=0)
    assert txctl("logs", first_line(proc.stdout), check=0).stdout == "hi there\n"
    # TorchX's sh quotes each argument for the shell
    proc = txctl("run", "--wait", f"{lib}/utils.py:sh", "echo", "$((1+2))", "a  b", check=0)
    assert txctl("logs", first_line(proc.stdout), check=0).stdout == "$((1+2)) a  b\n"
    dry = json.loads(
        txctl(
            "run", "--dryrun", "--json", f"{lib}/dist.py:ddp", "--script", "train.py",
            "-j", "1:2x2", "-h", "aws_p4d.24xlarge",
            "--mounts", "type=bind,src=/tmp,dst=/data,readonly", check=0,
        ).stdout
    )  # fmt: skip
    (role,) = dry["app"]["roles"]
    assert (role["num_replicas"], role["min_replicas"]) == (2, 1)
    assert "--nnodes 1:2 --nproc_per_node 2 " in role["args"][1]
    assert "$${${rank0_env}:=localhost}:29500" in role["args"][1]  # TorchX's macros, kept
    assert role["port_map"] == {"c10d": 29500}
    assert role["resource"]["devices"] == {"vpc.amazonaws.com/efa": 4}
    assert role["mounts"] == [
        {"bind": {"src_path": "/tmp", "dst_path": "/data", "read_only": True}}
    ]
    dry = json.loads(
        txctl(
            "run", "--dryrun", "--json", f"{lib}/utils.py:binary", "--entrypoint", "date", check=0
        ).stdout
    )
    assert dry["app"]["roles"][0]["image"] == ""  # TorchX's "<NONE>": no image


def test_torchx_component_help_and_errors(txctl: Any, comp: Path) -> None:
    text = txctl("run", "comp.py:trainer_ps", "--help", check=0).stdout
    assert re.search(r"--workers INT +trainer replicas \(default: 2\)", text)
    proc = txctl("run", "comp.py:hot_spare", check=2)
    no_traceback(proc)
    assert "retry_policy HOT_SPARE is not supported by txd" in proc.stderr


def test_torchx_component_without_torchx_says_how_to_install(
    shared_daemon: Any, comp: Path, workdir: Path
) -> None:
    code = WITHOUT_TORCHX + "from txd.client import cli\nsys.exit(cli.main(sys.argv[1:]))\n"
    before = shared_daemon.txctl("list", "--json", check=0).stdout
    for spec in ("comp.py:trainer_ps", "seed.py:ddp"):
        proc = run_python(
            code,
            *("--socket", str(shared_daemon.socket), "--no-autostart", "run", spec),
            env=shared_daemon.txctl_env(),
            cwd=workdir,
        )
        assert proc.returncode == 2, proc.stderr
        no_traceback(proc)
        path = spec.split(":")[0]
        assert proc.stderr == (
            f"txctl: error: {path} is a TorchX component: install torchx into the Python that "
            f"runs txctl with txd's torchx extra ({install.command('torchx')})\n"
        )
    # txd's own components need no torchx
    ok = run_python(
        code,
        *("--socket", str(shared_daemon.socket), "--no-autostart", "run", "--dryrun", "utils.echo"),
        env=shared_daemon.txctl_env(),
        cwd=workdir,
    )
    assert ok.returncode == 0, ok.stderr
    assert shared_daemon.txctl("list", "--json", check=0).stdout == before  # nothing submitted


async def test_client_accepts_a_torchx_appdef(client: Any, workdir: Path) -> None:
    from txd.v1 import AppState

    app = specs.AppDef(
        name="fromtorchx",
        roles=[
            specs.Role(
                name="w",
                image="/tmp",
                entrypoint="sh",
                args=["-c", f"echo {specs.macros.replica_id}"],
                num_replicas=2,
            )
        ],
    )
    handle = await client.run(app, cwd=str(workdir))
    assert (await client.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    desc = await client.describe(handle)
    (role,) = desc.app.roles
    assert (role.name, role.entrypoint, list(role.args)) == (
        "w",
        "sh",
        ["-c", "echo ${replica_id}"],
    )
    assert role.num_replicas == 2
    assert not role.HasField("resource")  # TorchX's NULL_RESOURCE: unset
    dry = await client.dryrun(app)
    assert dry.app.roles[0].name == "w"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: specs.Role(name="r", image="i", base_image="old"), r"'base_image' is not"),
        (lambda: specs.Role(name="r", image="i", args=[1]), r"args: expected a string, got int"),
        (lambda: specs.Role(name="r", image="i", metadata={"x": object()}), r"metadata\[x\]"),
    ],
)
def test_what_txd_cannot_represent_is_named(build: Any, message: str) -> None:
    from txd.client.torchx_compat import TorchXError, from_torchx

    with pytest.raises(TorchXError, match=r"^roles\[0\] \(r\).*" + message):
        from_torchx(specs.AppDef(name="a", roles=[build()]))
    with pytest.raises(
        TorchXError, match=r"expected a txd\.v1\.AppDef or a torchx\.specs\.AppDef, got dict"
    ):
        from_torchx({"name": "a"})
