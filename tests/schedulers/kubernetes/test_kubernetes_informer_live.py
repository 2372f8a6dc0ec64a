"""k8s_api and the informer against the real test cluster (apiserver without watch cache, so a
compacted etcd answers 410 Gone). Each test labels its ConfigMaps with a value of its own; every
expectation is ordered by events: a final "sentinel" object's ADDED closes each sequence, so an
event repeated or extra before it fails the test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from docker_testing import BUSYBOX
from k8s_testing import EXIT_ON_TERM, Cluster
from txd.schedulers.kubernetes.client import Kube, KubeError
from txd.schedulers.kubernetes.informer import SYNCED, Event, Informer, Synced

LABEL = "txd.dev/test"
EVENT_TIMEOUT = 60.0

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
async def kube(k8s_cluster: Cluster) -> AsyncIterator[Kube]:
    k = await Kube.connect(str(k8s_cluster.kubeconfig))
    try:
        yield k
    finally:
        await k.aclose()


@pytest.fixture
async def label(kube: Kube) -> AsyncIterator[str]:
    """A value of the test's own for its objects' label, and a namespace of that name."""
    name = f"w{uuid.uuid4().hex[:10]}"
    await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    try:
        yield name
    finally:
        await kube.request("DELETE", f"/api/v1/namespaces/{name}")


def cms(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps"


class Objects:
    """ConfigMaps of one test, made through the API; the resourceVersion each change left."""

    def __init__(self, kube: Kube, label: str) -> None:
        self.kube, self.label = kube, label

    async def create(self, name: str, *, label: str | None = None) -> str:
        labels = {LABEL: self.label if label is None else label}
        body = {"metadata": {"name": name, "labels": labels}, "data": {"v": "0"}}
        obj = await self.kube.request("POST", cms(self.label), body=body)
        return str(obj["metadata"]["resourceVersion"])

    async def change(self, name: str, value: str) -> str:
        obj = await self.kube.request(
            "PATCH",
            f"{cms(self.label)}/{name}",
            body={"data": {"v": value}},
            content_type="application/merge-patch+json",
        )
        return str(obj["metadata"]["resourceVersion"])

    async def delete(self, name: str) -> None:
        await self.kube.request("DELETE", f"{cms(self.label)}/{name}")


def seen(items: list[Event | Synced]) -> list[tuple[str, str] | Synced]:
    return [(i.type, i.name) if isinstance(i, Event) else i for i in items]


async def take(events: AsyncIterator[Event | Synced], until: str) -> list[Event | Synced]:
    """Everything the informer yields up to and including the ADDED of object `until`."""
    got: list[Event | Synced] = []
    async with asyncio.timeout(EVENT_TIMEOUT):
        async for item in events:
            got.append(item)
            if isinstance(item, Event) and item.type == "ADDED" and item.name == until:
                return got
    raise AssertionError(f"the events ended before {until} was added: {seen(got)}")


def kubectl_view(cluster: Cluster, label: str) -> dict[str, str]:
    """Name -> resourceVersion of the labelled ConfigMaps, as kubectl sees them."""
    out = cluster.kubectl(
        "get", "configmaps", "-n", label, "-l", f"{LABEL}={label}", "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.metadata.resourceVersion}{'\\n'}{end}",
    ).stdout  # fmt: skip
    return dict(line.split("=", 1) for line in out.split())


def versions(items: list[Event | Synced]) -> list[str]:
    return [i.obj["metadata"]["resourceVersion"] for i in items if isinstance(i, Event)]


class Feed:
    """An informer's events() consumed by a task of its own into a queue, as a scheduler
    consumes it: the informer reads on while the test acts."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self.queue: asyncio.Queue[Event | Synced] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Feed:
        self.task = asyncio.create_task(self._consume())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def _consume(self) -> None:
        async with contextlib.aclosing(self.informer.events()) as events:
            async for item in events:
                self.queue.put_nowait(item)

    async def next(self) -> Event | Synced:
        async with asyncio.timeout(EVENT_TIMEOUT):
            get = asyncio.ensure_future(self.queue.get())
            assert self.task is not None
            await asyncio.wait([get, self.task], return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                get.cancel()
                raise AssertionError(f"the informer ended: {self.task}")
            return get.result()

    async def until(self, name: str) -> list[Event | Synced]:
        """Every item up to and including the ADDED of object `name`."""
        got = [await self.next()]
        while seen(got[-1:]) != [("ADDED", name)]:
            got.append(await self.next())
        return got

    async def until_true(self, condition: Callable[[], bool]) -> None:
        """Waits for a condition on the informer's state while it runs."""
        async with asyncio.timeout(EVENT_TIMEOUT):
            while not condition():
                assert self.task is not None and not self.task.done(), self.task
                await asyncio.sleep(0.05)


def store_view(informer: Informer) -> dict[str, str]:
    return {n: o["metadata"]["resourceVersion"] for n, o in informer.store.items()}


async def test_list_then_watch_yields_each_change_in_order(
    k8s_cluster: Cluster, kube: Kube, label: str
) -> None:
    objs = Objects(kube, label)
    await objs.create("a0")
    # Watches of 1 s: the server ends them often, and each resumes from the last version.
    informer = Informer(kube, cms(label), f"{LABEL}={label}", "configmaps", timeout_seconds=1)
    async with Feed(informer) as feed:
        assert await feed.next() is SYNCED  # the list: no event, the store filled
        assert set(informer.store) == {"a0"}
        assert informer.store["a0"]["kind"] == "ConfigMap"
        rv1 = await objs.create("a1")
        rv2 = await objs.change("a1", "1")
        await objs.delete("a0")
        await objs.create("end1")
        got = await feed.until("end1")
        assert seen(got) == [
            ("ADDED", "a1"),
            ("MODIFIED", "a1"),
            ("DELETED", "a0"),
            ("ADDED", "end1"),
        ]
        assert versions(got[:2]) == [rv1, rv2]
        assert isinstance(got[1], Event) and got[1].obj["data"] == {"v": "1"}
        assert store_view(informer) == kubectl_view(k8s_cluster, label)
        # Across watches that the server ended: nothing repeated, nothing lost.
        watches = informer.watches
        await feed.until_true(lambda: informer.watches >= watches + 2)
        await objs.change("a1", "2")
        await objs.create("end2")
        assert seen(await feed.until("end2")) == [("MODIFIED", "a1"), ("ADDED", "end2")]
        assert (informer.relists, informer.gone) == (0, 0)
        assert store_view(informer) == kubectl_view(k8s_cluster, label)


async def test_objects_outside_the_selector_are_never_seen(kube: Kube, label: str) -> None:
    objs = Objects(kube, label)
    await objs.create("other-before", label=f"{label}x")
    informer = Informer(kube, cms(label), f"{LABEL}={label}", "configmaps")
    async with contextlib.aclosing(informer.events()) as events:
        assert await anext(events) is SYNCED
        assert informer.store == {}
        await objs.create("other-after", label=f"{label}x")
        await objs.change("other-before", "1")
        await objs.create("mine")
        await objs.delete("other-after")
        await objs.create("end")
        assert seen(await take(events, "end")) == [("ADDED", "mine"), ("ADDED", "end")]
        assert set(informer.store) == {"mine", "end"}


async def test_the_index_holds_the_objects_of_each_label_value(kube: Kube, label: str) -> None:
    """With index_label, labelled(v) is the store's objects whose label is v, after the list,
    each event (a relabelled object moves) and a refresh: one app's objects without a scan."""
    group = "txd.dev/test-group"

    async def create(name: str, value: str) -> None:
        labels = {LABEL: label, group: value}
        body = {"metadata": {"name": name, "labels": labels}, "data": {"v": "0"}}
        await kube.request("POST", cms(label), body=body)

    async def relabel(name: str, value: str) -> None:
        await kube.request(
            "PATCH",
            f"{cms(label)}/{name}",
            body={"metadata": {"labels": {group: value}}},
            content_type="application/merge-patch+json",
        )

    objs = Objects(kube, label)
    await create("a1", "a")
    await create("b1", "b")
    informer = Informer(kube, cms(label), f"{LABEL}={label}", "configmaps", index_label=group)

    def names(value: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in informer.labelled(value))

    async with contextlib.aclosing(informer.events()) as events:
        assert await anext(events) is SYNCED
        assert (names("a"), names("b")) == (["a1"], ["b1"])
        await create("a2", "a")
        await objs.change("b1", "1")
        await relabel("a1", "b")
        await objs.create("end")  # without the indexed label: in the store, not the index
        await take(events, "end")
        assert (names("a"), names("b")) == (["a2"], ["a1", "b1"])
        assert [o["data"] for o in informer.labelled("b") if o["metadata"]["name"] == "b1"] == [
            {"v": "1"}
        ]
        await objs.delete("a1")
        await create("end2", "c")
        await take(events, "end2")
        assert (names("a"), names("b"), names("c")) == (["a2"], ["b1"], ["end2"])
    await relabel("a2", "b")  # while nobody watches: the next list indexes it anew
    await informer.refresh()
    assert (names("a"), names("b"), names("c")) == ([], ["a2", "b1"], ["end2"])
    assert sum(len(informer.labelled(v)) for v in "abc") == len(informer.store) - 1


async def test_410_after_compaction_relists_and_yields_each_difference_once(
    k8s_cluster: Cluster, kube: Kube, label: str
) -> None:
    objs = Objects(kube, label)
    for name in ("a", "b", "c"):
        await objs.create(name)
    informer = Informer(kube, cms(label), f"{LABEL}={label}", "configmaps")
    async with contextlib.aclosing(informer.events()) as events:
        assert await anext(events) is SYNCED
        listed = informer.resource_version
        # The consumer pauses after the list: the watch from `listed` is not open yet.
        await objs.delete("a")
        rv_b = await objs.change("b", "1")
        rv_d = await objs.create("d")
        assert await asyncio.to_thread(k8s_cluster.compact_etcd) > int(listed)
        got = [await anext(events) for _ in range(4)]
        assert seen(got) == [("DELETED", "a"), ("MODIFIED", "b"), ("ADDED", "d"), SYNCED]
        assert versions(got[1:3]) == [rv_b, rv_d]
        assert (informer.gone, informer.relists) == (1, 1)  # the 410 path was taken
        assert store_view(informer) == kubectl_view(k8s_cluster, label)
        # The watch goes on from the relist's version.
        await objs.change("c", "1")
        await objs.create("end")
        assert seen(await take(events, "end")) == [("MODIFIED", "c"), ("ADDED", "end")]
        assert store_view(informer) == kubectl_view(k8s_cluster, label)


async def test_410_mid_watch_after_the_connection_dropped(
    k8s_cluster: Cluster, kube: Kube, label: str
) -> None:
    objs = Objects(kube, label)
    await objs.create("a")
    await objs.create("b")
    informer = Informer(kube, cms(label), f"{LABEL}={label}", "configmaps")
    async with contextlib.aclosing(informer.events()) as events:
        assert await anext(events) is SYNCED
        await objs.create("c")
        assert seen([await anext(events)]) == [("ADDED", "c")]
        # Paused mid-watch: its connection drops, objects change, their versions are compacted.
        await asyncio.to_thread(k8s_cluster.restart_apiserver)
        await objs.delete("a")
        await objs.change("c", "1")
        await objs.create("d")
        await asyncio.to_thread(k8s_cluster.compact_etcd)
        await objs.create("end")
        got = await take(events, "end")
        # The relist found "end" too: its ADDED comes with the difference, before SYNCED.
        assert seen(got) == [("DELETED", "a"), ("MODIFIED", "c"), ("ADDED", "d"), ("ADDED", "end")]
        assert await anext(events) is SYNCED
        assert (informer.gone, informer.relists) == (1, 1)
        assert store_view(informer) == kubectl_view(k8s_cluster, label)


async def test_apiserver_restart_under_a_running_informer(
    k8s_cluster: Cluster, kube: Kube, label: str
) -> None:
    objs = Objects(kube, label)
    informer = Informer(kube, cms(label), f"{LABEL}={label}", "configmaps")
    async with Feed(informer) as feed:
        assert await feed.next() is SYNCED
        await objs.create("a")
        await objs.create("before")
        assert seen(await feed.until("before")) == [("ADDED", "a"), ("ADDED", "before")]
        watches = informer.watches
        # The informer keeps consuming while the apiserver goes away and comes back.
        await asyncio.to_thread(k8s_cluster.restart_apiserver)
        await objs.change("a", "1")
        await objs.create("b")
        await objs.delete("a")
        await objs.create("after")
        assert seen(await feed.until("after")) == [
            ("MODIFIED", "a"),
            ("ADDED", "b"),
            ("DELETED", "a"),
            ("ADDED", "after"),
        ]
        # It resumed the watch from its version: no relist was needed.
        assert informer.watches > watches and informer.relists == 0
        assert store_view(informer) == kubectl_view(k8s_cluster, label)


async def test_a_new_events_call_relists_against_the_kept_store(
    k8s_cluster: Cluster, kube: Kube, label: str
) -> None:
    objs = Objects(kube, label)
    await objs.create("a")
    await objs.create("b")
    informer = Informer(kube, cms(label), f"{LABEL}={label}", "configmaps")
    async with contextlib.aclosing(informer.events()) as events:
        assert await anext(events) is SYNCED
    # The caller's events() ended (say, on a KubeError); meanwhile objects changed.
    await objs.delete("a")
    await objs.change("b", "1")
    await objs.create("c")
    async with contextlib.aclosing(informer.events()) as events:
        got = [await anext(events) for _ in range(4)]
    assert seen(got) == [("DELETED", "a"), ("MODIFIED", "b"), ("ADDED", "c"), SYNCED]
    assert (informer.lists, informer.relists, informer.gone) == (2, 1, 0)
    assert store_view(informer) == kubectl_view(k8s_cluster, label)


def _kubeconfig(path: Path, server: str, token: str = "t") -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}',"
        " insecure-skip-tls-verify: true}}]\n"
        f"users: [{{name: u, user: {{token: {token}}}}}]\n"
        "contexts: [{name: one, context: {cluster: c, user: u, namespace: team}}]\n"
        "current-context: one\n"
    )
    return path


async def test_configuration_errors_name_the_file_or_context(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(KubeError, match=f"kubeconfig {missing} does not exist") as e:
        await Kube.connect(str(missing))
    assert e.value.status == 0
    good = _kubeconfig(tmp_path / "config", "https://127.0.0.1:1")
    with pytest.raises(KubeError, match=f"kubeconfig {good} has no context 'two'.*one"):
        await Kube.connect(str(good), "two")
    bad = tmp_path / "bad"
    bad.write_text("clusters: [what\n")
    with pytest.raises(KubeError, match=f"kubeconfig {bad}: "):
        await Kube.connect(str(bad))
    kube = await Kube.connect(str(good))
    assert (kube.namespace, kube.server) == ("team", "https://127.0.0.1:1")
    await kube.aclose()
    await kube.aclose()
    with pytest.raises(KubeError, match="closed"):
        await kube.request("GET", "/api/v1/namespaces")


async def test_an_unreachable_server_is_status_0(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    kube = await Kube.connect(str(_kubeconfig(tmp_path / "config", f"https://127.0.0.1:{port}")))
    try:
        with pytest.raises(KubeError) as e:
            await kube.request("GET", cms("default"))
        assert e.value.status == 0
        assert f"cannot reach the Kubernetes API server at https://127.0.0.1:{port}" in str(e.value)
        assert "\n" not in str(e.value)
        informer = Informer(kube, cms("default"), "", "configmaps", retry_attempts=2)
        with pytest.raises(KubeError, match="cannot reach"):
            await anext(informer.events())
        assert informer.lists == 3  # the first attempt and 2 retries
    finally:
        await kube.aclose()


async def test_apiserver_errors_carry_its_status(kube: Kube, label: str) -> None:
    with pytest.raises(KubeError) as e:
        await kube.request("GET", f"{cms(label)}/{label}-none")
    assert (e.value.status, e.value.reason) == (404, "NotFound")
    assert e.value.message == f'configmaps "{label}-none" not found'
    assert str(e.value) == (
        f'GET {cms(label)}/{label}-none: configmaps "{label}-none" not found (404 NotFound)'
    )
    with pytest.raises(KubeError) as e:
        await kube.request("POST", cms(label), body={"metadata": {"name": "Not_A_Name"}})
    assert e.value.status == 422 and "Not_A_Name" in e.value.message


async def test_calls_count_each_request_by_kind(kube: Kube, label: str) -> None:
    objs = Objects(kube, label)
    assert kube.calls == {"create namespaces": 1}  # the label fixture's
    kube.calls.clear()
    await objs.create("a")
    await objs.change("a", "1")
    await kube.request("GET", f"{cms(label)}/a")
    await kube.request("PUT", f"{cms(label)}/a", body=await kube.request("GET", f"{cms(label)}/a"))
    with pytest.raises(KubeError, match="404"):
        await kube.request("GET", f"/api/v1/namespaces/{label}/pods/{label}/log")
    informer = Informer(kube, cms(label), f"{LABEL}={label}", "configmaps")
    async with contextlib.aclosing(informer.events()) as events:
        assert await anext(events) is SYNCED
        await objs.delete("a")
        assert seen([await anext(events)]) == [("DELETED", "a")]
    assert kube.calls == {
        "create configmaps": 1,
        "patch configmaps": 1,
        "get configmaps": 2,
        "replace configmaps": 1,
        "get log": 1,
        "list configmaps": 1,
        "watch configmaps": 1,
        "delete configmaps": 1,
    }


async def test_stream_follows_a_log_as_it_is_written(kube: Kube, label: str) -> None:
    """A followed log arrives while the pod runs (it would run for minutes more), and leaving
    the stream ends the request."""
    pods = f"/api/v1/namespaces/{label}/pods"
    script = EXIT_ON_TERM + "i=0; while [ $i -lt 600 ]; do echo line$i; i=$((i+1)); sleep 0.2; done"
    container = {
        "name": "main",
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
    }
    pod = {
        "metadata": {"name": label, "labels": {LABEL: label}},
        "spec": {"restartPolicy": "Never", "hostNetwork": True, "containers": [container]},
    }
    await kube.request("POST", pods, body=pod)
    try:
        informer = Informer(kube, pods, f"{LABEL}={label}", "pods")
        async with contextlib.aclosing(informer.events()) as events:
            async with asyncio.timeout(EVENT_TIMEOUT):
                async for item in events:
                    if item is not SYNCED and informer.store[label]["status"]["phase"] != "Pending":
                        break
        text = b""
        async with (
            asyncio.timeout(EVENT_TIMEOUT),
            kube.stream(f"{pods}/{label}/log", {"follow": True}) as chunks,
        ):
            async for chunk in chunks:
                text += chunk
                if b"line3\n" in text:
                    break
        assert text.startswith(b"line0\nline1\nline2\nline3\n"), text
        status = await kube.request("GET", f"{pods}/{label}")
        assert status["status"]["phase"] == "Running"
        assert kube.calls["get log"] == 1
    finally:
        await kube.request("DELETE", f"{pods}/{label}", body={"gracePeriodSeconds": 0})


def test_aclose_leaves_no_connection_open_however_late_the_server_answers(
    k8s_cluster: Cluster,
) -> None:
    """A stream left midway closes its TLS connection, which then waits for the server's
    close_notify. The apiserver, stopped right after the stream's headers, answers nothing:
    still, once aclose returns no connection to it is left open, for the end of the loop to
    leave behind (a socket found unclosed at GC)."""
    apiserver = int((k8s_cluster.run_dir / "kube-apiserver.pid").read_text())
    port = int(k8s_cluster.server.rsplit(":", 1)[1])
    left: list[str] = []

    async def stream_then_close() -> None:
        kube = await Kube.connect(str(k8s_cluster.kubeconfig))
        try:
            async with kube.stream(cms("default"), {"watch": "true"}):
                os.kill(apiserver, signal.SIGSTOP)  # the headers came; nothing more will
        finally:
            await kube.aclose()
        left.extend(connections_to(port))

    try:
        asyncio.run(stream_then_close())  # a loop of its own
    finally:
        os.kill(apiserver, signal.SIGCONT)
    assert left == []


def connections_to(port: int) -> list[str]:
    """This process's open TCP connections to 127.0.0.1:`port` (local address:port each)."""
    sockets = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own fd is gone by now
            sockets.add(os.readlink(f"/proc/self/fd/{fd}"))
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, inode = fields[1], fields[2], fields[9]
        if remote == f"0100007F:{port:04X}" and f"socket:[{inode}]" in sockets:
            found.append(f"127.0.0.1:{int(local.split(':')[1], 16)}")
    return found
