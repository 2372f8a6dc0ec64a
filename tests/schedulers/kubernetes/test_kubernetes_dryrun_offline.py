"""A dry run needs no cluster (issue 18, item 1): through a real txd and txctl whose cluster
configuration names nothing (or a server that does not answer), `run --dryrun` on kubernetes
and kubernetes_mcad prints the objects, and says what it had to assume (the server's version,
for the shape of plain apps; the AppWrapper API; the namespace) and how to choose otherwise;
the namespace it uses is named with where it came from (issue 20, gap 12). A real Run on the
same daemon still fails, naming why the cluster cannot be used. No cluster is started."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from txd_testing import Daemon, remove_tree, short_tmpdir

ECHO = ["utils.echo", "--msg", "hi"]
NO_CONFIG = "/nonexistent/txd-tests/kubeconfig"
VERSION_NOTE = "# the API server's version could not be asked"
NAMESPACE_NOTE = "# namespace 'default' assumed: no cluster configuration to take it from"
APPWRAPPER_NOTE = "# the cluster could not be asked which AppWrapper API it serves"


@pytest.fixture
def offline() -> Iterator[Daemon]:
    """A daemon whose kubeconfig does not exist (nor does ~/.kube/config, nor a service
    account: this is no pod), and whose Docker engine for workspaces neither."""
    root = short_tmpdir()
    d = Daemon(
        root,
        env={
            "KUBECONFIG": NO_CONFIG,
            "HOME": str(root / "home"),
            "DOCKER_HOST": f"unix://{root}/no-docker.sock",
        },
    ).start()
    try:
        yield d
    finally:
        d.close()
        remove_tree(root)


def _dryrun(d: Daemon, *args: str, workspace: bool = False) -> tuple[str, list[dict[str, Any]]]:
    """txctl run --dryrun's output: (the comment lines before the objects, the objects).
    Without a workspace unless `workspace`: then txctl's default, its working directory."""
    no_workspace = () if workspace else ("--workspace", "")
    out = d.txctl("run", "--dryrun", *no_workspace, *args, check=0).stdout
    request = out.split("=== SCHEDULER REQUEST", 1)[1].split("\n", 1)[1]
    notes = "\n".join(ln for ln in request.splitlines() if ln.startswith("#"))
    return notes, [o for o in yaml.safe_load_all(request) if o]


def _namespace(notes: str) -> str:
    """The namespace the objects go to, as the request's header line names it."""
    [line] = [
        ln
        for ln in notes.splitlines()
        if ln.endswith("every object after the first is owned by it")
    ]
    return line.removeprefix("# namespace ").partition(";")[0]


def test_plain_apps_assume_a_version_and_say_so(offline: Daemon) -> None:
    notes, objs = _dryrun(offline, "-s", "kubernetes", *ECHO)
    assert [o["kind"] for o in objs] == ["Service", "Job"]
    assert objs[1]["spec"]["completionMode"] == "Indexed"
    assert _namespace(notes) == "default"
    assert f"{VERSION_NOTE} (kubeconfig {NO_CONFIG} does not exist): built for Kubernetes " in (
        notes
    )
    assert "1.21 or later (indexed shape); for an older server give -c server_version=" in notes
    assert NAMESPACE_NOTE in notes and "give one with -c namespace=NS" in notes


def test_another_version_and_namespace_are_chosen_with_options(offline: Daemon) -> None:
    notes, objs = _dryrun(
        offline,
        "-s",
        "kubernetes",
        "-c",
        "server_version=1.20,namespace=ml",
        "utils.sh",
        "--num_replicas",
        "2",
        "true",
    )
    assert [o["kind"] for o in objs] == ["Service", "Job", "Job"]  # a Job per replica
    assert all("completionMode" not in o["spec"] for o in objs[1:])
    assert notes.splitlines() == [
        "# namespace 'ml': -c namespace",
        "# namespace ml; every object after the first is owned by it",
    ]


def test_volcano_needs_nothing_of_the_server(offline: Daemon) -> None:
    notes, objs = _dryrun(offline, "-s", "kubernetes", "-c", "queue=q", *ECHO)
    assert [(o["apiVersion"], o["kind"]) for o in objs] == [("batch.volcano.sh/v1alpha1", "Job")]
    assert objs[0]["spec"]["queue"] == "q"
    assert VERSION_NOTE not in notes
    assert NAMESPACE_NOTE in notes


def test_mcad_dryrun_works_offline(offline: Daemon) -> None:
    """Without a cluster to ask which AppWrapper API it serves: TorchX 0.7's, said so."""
    notes, objs = _dryrun(offline, "-s", "kubernetes_mcad", *ECHO)
    assert [(o["apiVersion"], o["kind"]) for o in objs] == [
        ("workload.codeflare.dev/v1beta1", "AppWrapper")
    ]
    assert "GenericItems" in objs[0]["spec"]["resources"]
    assert VERSION_NOTE not in notes
    assert NAMESPACE_NOTE in notes
    assert (
        f"{APPWRAPPER_NOTE} (kubeconfig {NO_CONFIG} does not exist): built for "
        "workload.codeflare.dev/v1beta1 (TorchX 0.7's); choose with -c appwrapper_version=API"
    ) in notes


@pytest.mark.parametrize(
    "version",
    ["v1beta2", "workload.codeflare.dev/v1beta2", "workload.codeflare.dev/v1beta1",
     "mcad.ibm.com/v1beta1"],
)  # fmt: skip
def test_mcad_api_chosen_by_option(offline: Daemon, version: str) -> None:
    notes, objs = _dryrun(
        offline, "-s", "kubernetes_mcad", "-c", f"appwrapper_version={version}", *ECHO
    )
    want = "workload.codeflare.dev/v1beta2" if version == "v1beta2" else version
    assert [(o["apiVersion"], o["kind"]) for o in objs] == [(want, "AppWrapper")]
    assert APPWRAPPER_NOTE not in notes


def test_an_ambiguous_appwrapper_version_is_named(offline: Daemon) -> None:
    out = offline.txctl(
        "run", "--dryrun", "--workspace", "", "-s", "kubernetes_mcad",
        "-c", "appwrapper_version=v1beta1", *ECHO,
    )  # fmt: skip
    assert out.returncode == 2, out
    assert (
        "-c appwrapper_version=v1beta1: ambiguous: workload.codeflare.dev/v1beta1 (MCAD >= 1.34, "
        "TorchX's) or mcad.ibm.com/v1beta1, got 'v1beta1'"
    ) in out.stderr


@pytest.mark.parametrize("scheduler", ["kubernetes", "kubernetes_mcad"])
def test_expand_vars_leaves_dollars_to_kubernetes(offline: Daemon, scheduler: str) -> None:
    """By default each `$` is doubled (Kubernetes passes the text on as given); with
    expand_vars, as TorchX, `$(VAR)` is left for Kubernetes to expand."""
    app = ["utils.sh", "--env", "X=$(HOME)", "echo", "$(HOSTNAME)", "$HOME"]

    def command_env(*cfg: str) -> tuple[list[str], dict[str, str]]:
        _, objs = _dryrun(offline, "-s", scheduler, *cfg, *app)
        found = _containers(objs)
        assert len(found) == 1, objs
        c = found[0]
        return c["command"], {e["name"]: e.get("value", "") for e in c["env"]}

    script = "echo '$(HOSTNAME)' '$HOME'"  # utils.sh's sh -c script
    command, env = command_env()
    assert command[-1] == script.replace("$", "$$") and env["X"] == "$$(HOME)"
    command, env = command_env("-c", "expand_vars=true")
    assert command[-1] == script and env["X"] == "$(HOME)"


def _containers(obj: Any) -> list[dict[str, Any]]:
    """Every container spec in obj, however deep (a Job's template, an AppWrapper's items)."""
    if isinstance(obj, dict):
        if "containers" in obj and isinstance(obj["containers"], list):
            return list(obj["containers"])
        return [c for v in obj.values() for c in _containers(v)]
    if isinstance(obj, list):
        return [c for v in obj for c in _containers(v)]
    return []


@pytest.mark.parametrize("scheduler", ["kubernetes", "kubernetes_mcad"])
def test_a_workspace_needs_no_engine_in_a_dry_run(offline: Daemon, scheduler: str) -> None:
    """txctl's default workspace (its working directory) is built on a Docker engine, which
    a dry run need not reach either: it says what it would build."""
    out = offline.txctl("run", "--dryrun", "-s", scheduler, *ECHO, check=0).stdout
    assert ": would build an image FROM ghcr.io/pytorch/torchx" in out
    assert "the Docker engine does not answer" in out
    notes, objs = _dryrun(offline, "-s", scheduler, *ECHO, workspace=True)
    assert NAMESPACE_NOTE in notes
    assert "image: txd-workspace:digest-unknown" in yaml.safe_dump(objs)


def test_a_bad_server_version_is_named(offline: Daemon) -> None:
    out = offline.txctl(
        "run", "--dryrun", "--workspace", "", "-s", "kubernetes", "-c", "server_version=new", *ECHO
    )
    assert out.returncode == 2
    assert "-c server_version=new: expected MAJOR.MINOR like 1.30, got 'new'" in out.stderr


@pytest.mark.parametrize("scheduler", ["kubernetes", "kubernetes_mcad"])
def test_a_real_run_still_fails_naming_the_cause(offline: Daemon, scheduler: str) -> None:
    out = offline.txctl("run", "--workspace", "", "-s", scheduler, *ECHO)
    assert out.returncode == 4, out  # the backend is unavailable
    assert out.stderr.strip() == (
        f"txctl: error: {scheduler} backend unavailable: {scheduler}: kubeconfig {NO_CONFIG} "
        "does not exist"
    )
    assert offline.txctl("list", "--json", check=0).stdout.strip() == "[]"


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_configured_cluster_that_does_not_answer(tmp_path: Path) -> None:
    """The kubeconfig exists (its context's namespace is used) but its server refuses: the
    version is assumed, and the note says why."""
    config = tmp_path / "kubeconfig"
    server = f"https://127.0.0.1:{_closed_port()}"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns1"}}
                ],
                "current-context": "x",
            }
        )
    )
    root = short_tmpdir()
    d = Daemon(root, env={"KUBECONFIG": str(config), "HOME": str(root / "home")}).start()
    try:
        notes, objs = _dryrun(d, "-s", "kubernetes", *ECHO)
        assert [o["kind"] for o in objs] == ["Service", "Job"]
        assert _namespace(notes) == "ns1"
        assert f"{VERSION_NOTE} (" in notes and server in notes, notes
        assert NAMESPACE_NOTE not in notes
        # Where the namespace came from, and TorchX's choice beside it (gap 12).
        assert (
            f"# namespace 'ns1': the context's (kubeconfig {config}, context x); TorchX's would "
            "be 'default' (-c namespace=default)"
        ) in notes.splitlines(), notes
        notes, objs = _dryrun(d, "-s", "kubernetes_mcad", *ECHO)
        assert objs[0]["apiVersion"] == "workload.codeflare.dev/v1beta1"
        assert f"{APPWRAPPER_NOTE} (" in notes and server in notes, notes
        out = d.txctl("run", "--workspace", "", "-s", "kubernetes", *ECHO)
        assert out.returncode == 4 and "kubernetes backend unavailable" in out.stderr, out
    finally:
        d.close()
        remove_tree(root)
