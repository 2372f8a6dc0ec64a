"""kubernetes through a real txd on the real test cluster (Kubernetes 1.20: plain batch/v1 Jobs
under a headless Service): what runs, how it ends, its logs, cancel, delete, a missing image,
the watch across 410 Gone and an apiserver restart, a daemon restart, DryRun, bad options and
list. Every pod uses the node's network and the engine's test images (k8s_testing.K8S_CFG).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from docker_testing import BUSYBOX
from k8s_testing import K8S_CFG, Cluster, gated_role, sh_role
from txd.schedulers.api import SUBSCRIBED, Change, NoAnswer, SubmitContext, Subscribed
from txd.schedulers.kubernetes import kubernetes
from txd.v1 import AppDef, AppState, AppStatus, BindMount, CfgValue, Mount, Role
from txd_testing import Daemon, read_logs, read_logs_by_replica, repeated_statuses, unique

SCHED = "kubernetes"
GONE_TIMEOUT = 90.0  # the garbage collector's removing what a deleted root owned

pytestmark = pytest.mark.timeout(240)


def app_name(handle: str) -> str:
    """The objects' name of a handle kubernetes://<session>/<namespace>:<name>."""
    return handle.rsplit(":", 1)[1]


def objects_of(cluster: Cluster, ns: str, name: str, kinds: str = "services,jobs,pods") -> Any:
    """The app's objects of these kinds, as kubectl sees them (kind/name)."""
    out = cluster.kubectl(
        "get", kinds, "-n", ns, "-l", f"txd.dev/app-id={name}", "-o", "name"
    ).stdout.split()
    return sorted(out)


def pods_of(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", f"txd.dev/app-id={name}", "-o", "json")
    return list(json.loads(out.stdout)["items"])


def wait_until_gone(cluster: Cluster, ns: str, name: str, kinds: str) -> None:
    """Until kubectl finds none of the app's objects of these kinds (bounded)."""
    left = objects_of(cluster, ns, name, kinds)
    if not left:
        return
    # kubectl wait --for=delete returns as soon as each is gone (a watch, not a poll).
    cluster.kubectl(
        "wait", "--for=delete", f"--timeout={GONE_TIMEOUT:.0f}s", "-n", ns, *left,
        check=False, timeout=GONE_TIMEOUT + 30,
    )  # fmt: skip
    assert objects_of(cluster, ns, name, kinds) == []


async def test_a_two_role_three_replica_app_succeeds_with_real_pods_and_logs(
    k8s_client: Any, k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    app = AppDef(
        name="two",
        roles=[
            sh_role("trainer", 'echo "t ${replica_id} $TORCHX_RANK0_HOST"', replicas=2),
            sh_role("ps", 'echo "p ${replica_id} ${app_id}"'),
        ],
    )
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    name = app_name(handle)
    assert handle == f"kubernetes://txd/{k8s_namespace}:{name}"
    final = await k8s_client.wait(handle, timeout=120)
    assert final.state == AppState.SUCCEEDED, final
    assert [(r.role, [x.exit_code for x in r.replicas]) for r in final.roles] == [
        ("trainer", [0, 0]),
        ("ps", [0]),
    ]
    assert await read_logs_by_replica(k8s_client, handle) == {
        "trainer/0": b"t 0 localhost\n",
        "trainer/1": f"t 1 trainer-0.{name}\n".encode(),
        "ps/0": f"p 0 {name}\n".encode(),
    }
    # The cluster's own view: a Service, a Job per replica, the pods their controller made.
    assert objects_of(k8s_cluster, k8s_namespace, name) == sorted(
        [f"service/{name}"]
        + [f"job.batch/{name}-{r}" for r in ("trainer-0", "trainer-1", "ps-0")]
        + [f"pod/{p['metadata']['name']}" for p in pods_of(k8s_cluster, k8s_namespace, name)]
    )
    pods = pods_of(k8s_cluster, k8s_namespace, name)
    assert sorted(
        (p["metadata"]["labels"]["txd.dev/role"], p["metadata"]["labels"]["txd.dev/replica-id"])
        for p in pods
    ) == [("ps", "0"), ("trainer", "0"), ("trainer", "1")]
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
    assert all(p["spec"]["hostNetwork"] for p in pods)


def sleeper(name: str, replicas: int = 1) -> Role:
    """Writes "up", then sleeps until stopped: SIGTERM ends it at once (sh as PID 1 would
    ignore it, and the kubelet would wait out the grace period)."""
    return sh_role(name, "trap 'exit 143' TERM; echo up; sleep 600 & wait $!", replicas=replicas)


async def wait_running(client: Any, handle: str) -> AppStatus:
    """The app's status once every replica's pod runs (pushed by the daemon's watch)."""
    seen: list[str] = []
    try:
        async with asyncio.timeout(120):
            async for status in client.watch(handle):
                replicas = [r for role in status.roles for r in role.replicas]
                seen.append(f"{AppState.Name(status.state)} {[r.state for r in replicas]}")
                if replicas and all(r.state == AppState.RUNNING for r in replicas):
                    return status
    except TimeoutError:
        raise AssertionError(f"{handle} not running within 120 s; statuses seen: {seen}") from None
    raise AssertionError(f"{handle} ended before all its replicas ran: {seen}")


async def test_a_failing_replica_fails_the_app_with_its_exit_code(k8s_client: Any) -> None:
    app = AppDef(
        name="fails",
        roles=[sh_role("main", 'echo "r ${replica_id}"; exit ${replica_id}3', replicas=2)],
    )
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    final = await k8s_client.wait(handle, timeout=120)
    assert final.state == AppState.FAILED, final
    assert [r.exit_code for r in final.roles[0].replicas] == [3, 13]
    assert [r.state for r in final.roles[0].replicas] == [AppState.FAILED] * 2
    assert "main/1 exited with 13" in final.msg, final
    assert (await read_logs_by_replica(k8s_client, handle)) == {
        "main/0": b"r 0\n",
        "main/1": b"r 1\n",
    }


async def test_cancel_while_running_is_cancelled_and_leaves_no_pod(
    k8s_client: Any, k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    app = AppDef(name="cancel", roles=[sleeper("main", replicas=2)])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    await wait_running(k8s_client, handle)
    await k8s_client.cancel(handle)
    final = await k8s_client.wait(handle, timeout=120)
    assert final.state == AppState.CANCELLED, final
    assert [r.state for r in final.roles[0].replicas] == [AppState.CANCELLED] * 2
    name = app_name(handle)
    wait_until_gone(k8s_cluster, k8s_namespace, name, "pods")
    # The record stays: the Service and the Jobs, stopped and marked.
    jobs = json.loads(
        k8s_cluster.kubectl(
            "get", "jobs", "-n", k8s_namespace, "-l", f"txd.dev/app-id={name}", "-o", "json"
        ).stdout
    )["items"]
    assert len(jobs) == 2
    for job in jobs:
        assert job["spec"]["parallelism"] == 0
        assert job["metadata"]["annotations"]["txd.dev/cancelled"] == "true"
    assert (await k8s_client.status(handle)).state == AppState.CANCELLED


async def test_delete_leaves_no_object(
    k8s_client: Any, k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    app = AppDef(name="delete", roles=[sleeper("main", replicas=2), sleeper("ps")])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    name = app_name(handle)
    await wait_running(k8s_client, handle)
    assert len(objects_of(k8s_cluster, k8s_namespace, name, "services,jobs")) == 4
    await k8s_client.delete(handle)
    # The root goes at once; the garbage collector takes the Jobs, then their pods.
    wait_until_gone(k8s_cluster, k8s_namespace, name, "services,jobs,pods")
    with pytest.raises(Exception) as e:
        await k8s_client.status(handle)
    assert getattr(e.value, "code", "") == "NOT_FOUND", e.value


async def test_an_app_deleted_outside_txd_keeps_its_last_state_marked_stale(
    k8s_client: Any, k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    """Through the daemon, as a client sees it. Run right after a test that left the daemon no
    job to follow, its submit also checks that the new job's status keeps up with its pod: its
    feed starts anew, and a describe of it races the new feed's first pushes."""
    app = AppDef(name="behind", roles=[sleeper("main")])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    name = app_name(handle)
    await wait_running(k8s_client, handle)
    # The root goes behind txd's back; the garbage collector takes the rest.
    k8s_cluster.kubectl("delete", "service", "-n", k8s_namespace, name, "--wait=false")
    wait_until_gone(k8s_cluster, k8s_namespace, name, "services,jobs,pods")
    seen = []
    async with asyncio.timeout(60):
        async for status in k8s_client.watch(handle):  # pushed by the watch, no resync
            seen.append(status)
            if status.stale_msg:
                break
    assert seen and "deleted outside txd" in seen[-1].stale_msg, seen
    assert seen[-1].state == AppState.RUNNING, seen[-1]  # the last state known, kept


async def test_the_change_stream_pushes_no_answer_for_an_app_deleted_outside_txd(
    k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    """The scheduler's own stream says what describe_many would (NoAnswer: the last state
    kept), instead of a second SUBSCRIBED that has the daemon describe every job."""
    settings = {"kubeconfig": str(k8s_cluster.kubeconfig), "namespace": k8s_namespace}
    sched = kubernetes.create_scheduler("changes", settings=settings)
    cfg = {
        k: CfgValue(bool=v) if isinstance(v, bool) else CfgValue(str=v) for k, v in K8S_CFG.items()
    }
    seen: list[Change | Subscribed] = []
    async with asyncio.TaskGroup() as tasks:
        await sched.start(tasks)
        try:
            app = AppDef(name="behind", roles=[sleeper("main")])
            info = await sched.submit_dryrun(app, cfg, SubmitContext(cwd="/", env={}))
            app_id = (await sched.schedule(info)).app_id
            deleted = False
            async with asyncio.timeout(180), contextlib.aclosing(sched.changes()) as changes:
                async for item in changes:
                    seen.append(item)
                    if not isinstance(item, Change) or item.app_id != app_id:
                        continue
                    if isinstance(item.status, NoAnswer):
                        break
                    if not deleted and item.status and item.status.state == AppState.RUNNING:
                        deleted = True  # behind txd's back: the collector takes the rest
                        await asyncio.to_thread(
                            k8s_cluster.kubectl,
                            "delete", "service", "-n", k8s_namespace, app_id.partition(":")[2],
                        )  # fmt: skip
        finally:
            await sched.aclose()
    assert [i for i in seen if isinstance(i, Subscribed)] == [SUBSCRIBED], seen
    assert seen[-1] == Change(app_id, NoAnswer(kubernetes.REMOVED)), seen


async def test_logs_followed_while_running_then_since_until_and_one_stream_unimplemented(
    k8s_client: Any, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    role = gated_role("main", gate, first="early", then="late")
    handle = await k8s_client.run(AppDef(name="logs", roles=[role]), scheduler=SCHED, cfg=K8S_CFG)
    follow = aiter(k8s_client.logs(handle, "main", 0, follow=True))
    async with asyncio.timeout(120):
        assert (await anext(follow)).data == b"early\n"  # running: "late" is not written yet
    # "early" was stamped before it reached us; "late" is written only after the gate opens.
    middle = dt.datetime.now(dt.UTC)
    (gate / "go").touch()
    async with asyncio.timeout(120):
        rest = b"".join([chunk.data async for chunk in follow])  # ends with the job
    assert rest == b"late\n"
    assert (await k8s_client.status(handle)).state == AppState.SUCCEEDED
    assert await read_logs(k8s_client, handle, until=middle) == b"early\n"
    assert await read_logs(k8s_client, handle, since=middle) == b"late\n"
    assert await read_logs(k8s_client, handle, regex="^l") == b"late\n"
    assert await read_logs(k8s_client, handle, tail=1) == b"late\n"
    for stream in ("stdout", "stderr"):
        with pytest.raises(Exception) as e:
            await read_logs(k8s_client, handle, streams=stream)
        assert getattr(e.value, "code", "") == "UNIMPLEMENTED", e.value
        assert "stdout and stderr apart" in str(e.value), e.value


async def test_an_image_that_cannot_be_pulled_is_a_clear_message(k8s_client: Any) -> None:
    # A registry on loopback where nothing listens: the kubelet's pull fails at once.
    image = "127.0.0.1:9/txd-test/missing:1"
    app = AppDef(name="noimage", roles=[sh_role("main", "true", image=image)])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    seen = []
    async with asyncio.timeout(120):
        async for status in k8s_client.watch(handle):
            seen.append((AppState.Name(status.state), status.msg))
            if "ErrImagePull" in status.msg or "ImagePullBackOff" in status.msg:
                break
    assert status.state == AppState.PENDING, seen
    assert status.msg.startswith("main/0 "), status.msg
    assert "127.0.0.1:9" in status.msg, status.msg  # the registry it could not reach
    rep = status.roles[0].replicas[0]
    assert rep.structured_error_msg.split(":")[0] in ("ErrImagePull", "ImagePullBackOff"), rep
    await k8s_client.cancel(handle)
    assert (await k8s_client.wait(handle, timeout=120)).state == AppState.CANCELLED


async def test_dryrun_prints_every_object_as_yaml_in_creation_order(
    k8s_client: Any, k8s_namespace: str
) -> None:
    app = AppDef(name="dry", roles=[sh_role("main", "true", replicas=2), sh_role("ps", "true")])
    info = await k8s_client.dryrun(app, scheduler=SCHED, cfg=K8S_CFG)
    # The namespace, where it came from, and TorchX's (issue 20, gap 12).
    assert info.request.splitlines()[:2] == [
        f"# namespace {k8s_namespace!r}: the daemon's setting [schedulers.kubernetes] namespace; "
        "TorchX's would be 'default' (-c namespace=default)",
        f"# namespace {k8s_namespace}; every object after the first is owned by it",
    ], info.request
    docs = list(yaml.safe_load_all(info.request))
    name = docs[0]["metadata"]["name"]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Service", name),
        ("Job", f"{name}-main-0"),
        ("Job", f"{name}-main-1"),
        ("Job", f"{name}-ps-0"),
    ]
    pod = docs[2]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert pod["containers"][0]["command"] == ["sh", "-c", "true"]
    labels = docs[2]["metadata"]["labels"]
    assert (labels["txd.dev/scheduler"], labels["txd.dev/role"], labels["txd.dev/replica-id"]) == (
        SCHED,
        "main",
        "1",
    )
    # Nothing was created.
    assert name not in {s.app_id.partition(":")[2] for s in await k8s_client.list(SCHED)}


async def test_expand_vars_lets_kubernetes_expand_var_references(k8s_client: Any) -> None:
    """Off (txd's default) a pod sees `$(VAR)` exactly as given; with expand_vars Kubernetes
    expands it in args and env, as it does for TorchX's pods. (`$$` is no test: the app's
    macros already make it `$`, as TorchX's do.)"""
    script = "echo '$(FOO)' '$(NOT_SET)'; echo \"$BAR\""
    role = sh_role("main", script)
    role.env.update({"FOO": "bar", "BAR": "x-$(FOO)"})
    handles = {
        expand: await k8s_client.run(
            AppDef(name="vars", roles=[role]),
            scheduler=SCHED,
            cfg={**K8S_CFG, "expand_vars": expand},
        )
        for expand in (False, True)
    }
    for handle in handles.values():
        final = await k8s_client.wait(handle, timeout=120)
        assert final.state == AppState.SUCCEEDED, final
    assert await read_logs_by_replica(k8s_client, handles[False]) == {
        "main/0": b"$(FOO) $(NOT_SET)\nx-$(FOO)\n"
    }
    assert await read_logs_by_replica(k8s_client, handles[True]) == {
        "main/0": b"bar $(NOT_SET)\nx-bar\n"  # Kubernetes leaves unknown names as they are
    }


async def test_retries_rerun_a_failed_replica(k8s_client: Any, tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    mark.mkdir()
    script = (
        "if [ -e /mark/tried ]; then echo second; exit 0; fi; touch /mark/tried; echo first; exit 4"
    )
    role = sh_role("main", script)
    role.max_retries = 1
    role.mounts.append(Mount(bind=BindMount(src_path=str(mark), dst_path="/mark")))
    handle = await k8s_client.run(AppDef(name="retry", roles=[role]), scheduler=SCHED, cfg=K8S_CFG)
    final = await k8s_client.wait(handle, timeout=120)
    assert final.state == AppState.SUCCEEDED, final
    assert final.num_restarts == 1, final
    assert await read_logs(k8s_client, handle) == b"second\n"  # the newest attempt's pod


@pytest.mark.parametrize(
    ("cfg", "image", "wanted"),
    [
        ({"image_pull_policy": "Sometimes"}, BUSYBOX, "cfg.image_pull_policy"),
        ({"node_selector": "disk=a b"}, BUSYBOX, "cfg.node_selector"),
        ({"host_network": "maybe"}, BUSYBOX, "host_network"),
        ({"no_such_option": "x"}, BUSYBOX, "no_such_option"),
        ({}, "", "app.roles[0].image"),
    ],
)
async def test_bad_input_is_a_one_line_error_naming_the_field(
    k8s_client: Any, cfg: dict[str, Any], image: str, wanted: str
) -> None:
    app = AppDef(name="bad", roles=[sh_role("main", "true", image=image)])
    for call in (k8s_client.dryrun, k8s_client.run):
        with pytest.raises(Exception) as e:
            await call(app, scheduler=SCHED, cfg={**K8S_CFG, **cfg})
        assert getattr(e.value, "code", "") == "INVALID_ARGUMENT", e.value
        assert wanted in str(e.value) and "\n" not in str(e.value), e.value


async def test_list_finds_the_apps_of_the_namespace_from_their_labels(
    k8s_client: Any, k8s_namespace: str
) -> None:
    name = unique("listed")
    app = AppDef(name=name, roles=[sh_role("a", "true", replicas=2), sh_role("b", "true")])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    assert (await k8s_client.wait(handle, timeout=120)).state == AppState.SUCCEEDED
    listed = {s.app_id: s for s in await k8s_client.list(SCHED, backend=True)}
    aid = f"{k8s_namespace}:{app_name(handle)}"
    assert listed[aid].state == AppState.SUCCEEDED, listed[aid]
    assert [(r.role, len(r.replicas)) for r in listed[aid].roles] == [("a", 2), ("b", 1)]
    assert all(s.app_id.startswith(f"{k8s_namespace}:") for s in listed.values())


async def _watch_all(client: Any, handle: str, into: list[Any]) -> None:
    async for status in client.watch(handle):
        into.append(status)


async def _list_calls(client: Any) -> int:
    info = {s.name: s for s in (await client.schedulers()).schedulers}
    return int(info[SCHED].backend_calls.get("list pods", 0))


async def test_410_gone_mid_job_relists_and_the_end_is_seen_once(
    own_k8s_daemon: Daemon, k8s_cluster: Cluster, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    app = AppDef(name="gone", roles=[gated_role("main", gate, replicas=2)])
    async with own_k8s_daemon.client() as c:
        handle = await c.run(app, scheduler=SCHED, cfg=K8S_CFG)
        seen: list[Any] = []
        watcher = asyncio.create_task(_watch_all(c, handle, seen))
        await wait_running(c, handle)
        lists = await _list_calls(c)

        def while_down() -> None:
            # The job ends and its version is compacted away while the watch is cut off: the
            # watch's resumption is 410 Gone, and only a relist can show the end.
            (gate / "go").touch()
            k8s_cluster.compact_etcd(advance=2)

        await asyncio.to_thread(k8s_cluster.restart_apiserver, while_down=while_down)
        final = await c.wait(handle, timeout=120)
        async with asyncio.timeout(30):
            await watcher
        assert final.state == AppState.SUCCEEDED, final
        assert not final.stale_msg, final
        states = [s.state for s in seen]
        assert states.count(AppState.SUCCEEDED) == 1 and states[-1] == AppState.SUCCEEDED, seen
        assert repeated_statuses(seen) == [], seen
        assert await _list_calls(c) > lists  # the relist


async def test_the_apiserver_restarted_under_a_running_txd(
    own_k8s_daemon: Daemon, k8s_cluster: Cluster, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    app = AppDef(name="across", roles=[gated_role("main", gate)])
    async with own_k8s_daemon.client() as c:
        handle = await c.run(app, scheduler=SCHED, cfg=K8S_CFG)
        await wait_running(c, handle)
        await asyncio.to_thread(k8s_cluster.restart_apiserver)
        (gate / "go").touch()  # its end reaches txd through the resumed watch
        final = await c.wait(handle, timeout=120)
        assert final.state == AppState.SUCCEEDED, final
        assert not final.stale_msg, final
        # And the daemon submits through the new apiserver.
        again = await c.run(
            AppDef(name="after", roles=[sh_role("m", "echo ok")]), scheduler=SCHED, cfg=K8S_CFG
        )
        assert (await c.wait(again, timeout=120)).state == AppState.SUCCEEDED
        assert await read_logs(c, again) == b"ok\n"


async def test_a_restarted_daemon_refinds_every_job(own_k8s_daemon: Daemon, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    async with own_k8s_daemon.client() as c:
        done = await c.run(
            AppDef(name="done", roles=[sh_role("m", "exit 0")]), scheduler=SCHED, cfg=K8S_CFG
        )
        failed = await c.run(
            AppDef(name="failed", roles=[sh_role("m", "exit 5")]), scheduler=SCHED, cfg=K8S_CFG
        )
        ends = await c.run(
            AppDef(name="ends", roles=[gated_role("m", gate)]), scheduler=SCHED, cfg=K8S_CFG
        )
        runs = await c.run(AppDef(name="runs", roles=[sleeper("m")]), scheduler=SCHED, cfg=K8S_CFG)
        assert (await c.wait(done, timeout=120)).state == AppState.SUCCEEDED
        assert (await c.wait(failed, timeout=120)).state == AppState.FAILED
        await wait_running(c, ends)
        await wait_running(c, runs)
    own_k8s_daemon.stop()
    (gate / "go").touch()  # it ends while no txd watches
    own_k8s_daemon.restart()
    async with own_k8s_daemon.client() as c:
        assert (await c.status(done)).state == AppState.SUCCEEDED
        assert (await c.status(failed)).state == AppState.FAILED
        assert (await c.wait(ends, timeout=120)).state == AppState.SUCCEEDED
        status = await c.status(runs)
        assert status.state == AppState.RUNNING, status
        await c.cancel(runs)
        assert (await c.wait(runs, timeout=120)).state == AppState.CANCELLED
