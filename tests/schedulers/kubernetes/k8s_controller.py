"""The test as the controller the test cluster lacks (importable as `k8s_controller`): Volcano's
and MCAD's controllers are not installed (only their CRDs), so a test makes the pods they would
make from a Volcano Job's tasks or an AppWrapper's items, owned by that object, and moves the
object through its phases by patching its status subresource, as they would.

`PlayedController` does that for every object of a kind, as a task (the contract suite's
jobs). `StatusStream` follows one app's status as txd pushes it, so a test waits for the state each
phase maps to (ordered by events, never by sleeping).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker_testing import BUSYBOX
from k8s_testing import EXIT_ON_TERM
from txd.schedulers.kubernetes.client import Kube, KubeError
from txd.schedulers.kubernetes.informer import Event, Informer
from txd.v1 import AppState, AppStatus, BindMount, Mount, Role

VOLCANO_JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs"
# By API (txd's appwrapper_version values).
APPWRAPPERS = {
    api: f"/apis/{api}/namespaces/{{ns}}/appwrappers"
    for api in (
        "workload.codeflare.dev/v1beta2",
        "workload.codeflare.dev/v1beta1",
        "mcad.ibm.com/v1beta1",
    )
}
STATUS_TIMEOUT = 120.0


class Controller:
    """Creates what a controller would for one object (at `path`), and patches its status."""

    def __init__(self, kube: Kube, ns: str, collection: str, name: str) -> None:
        self.kube, self.ns, self.name = kube, ns, name
        self.path = f"{collection.format(ns=ns)}/{name}"

    async def get(self) -> dict[str, Any]:
        return await self.kube.request("GET", self.path)

    def _owner(self, obj: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": self.name,
            "uid": obj["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }

    async def create(self, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Creates the objects (Pods, Services) owned by this one, as its controller would."""
        owner = self._owner(await self.get())
        out = []
        for obj in objects:
            obj = copy.deepcopy(obj)
            obj["metadata"]["ownerReferences"] = [owner]
            plural = {"Pod": "pods", "Service": "services"}[obj["kind"]]
            path = f"/api/v1/namespaces/{self.ns}/{plural}"
            try:
                out.append(await self.kube.request("POST", path, body=obj))
            except KubeError as e:  # made by an earlier try that the apiserver cut short
                if e.status != 409:
                    raise
        return out

    async def volcano_pods(self) -> list[dict[str, Any]]:
        """Volcano's pods for the Job's tasks: one per task replica, `<job>-<task>-<i>`."""
        job = await self.get()
        pods = []
        for task in job["spec"]["tasks"]:
            for i in range(int(task.get("replicas", 1))):
                template = copy.deepcopy(task["template"])
                meta = {"name": f"{self.name}-{task['name']}-{i}", **template["metadata"]}
                pods.append({"apiVersion": "v1", "kind": "Pod", **template, "metadata": meta})
        return await self.create(pods)

    async def appwrapper_items(self) -> list[dict[str, Any]]:
        """MCAD's objects for the AppWrapper's items (v1beta2 components, v1beta1
        GenericItems), PodGroups left out (their CRD is the coscheduler's)."""
        spec = (await self.get())["spec"]
        if "components" in spec:
            inner = [c["template"] for c in spec["components"]]
        else:
            inner = [g["generictemplate"] for g in spec["resources"]["GenericItems"]]
        return await self.create([o for o in inner if o["kind"] != "PodGroup"])

    async def set_status(self, status: dict[str, Any], version: str = "") -> dict[str, Any]:
        """Merges `status` into the object's status through the status subresource; with a
        resourceVersion, only if the object is still that version (else 409 Conflict), as a
        controller writes what it decided from what it saw."""
        body: dict[str, Any] = {"status": status}
        if version:
            body["metadata"] = {"resourceVersion": version}
        return await self.kube.request(
            "PATCH", f"{self.path}/status", body=body, content_type="application/merge-patch+json"
        )

    async def delete_pods(self) -> None:
        """Deletes the pods of the app (as a controller stopping it), at once."""
        await self.kube.request(
            "DELETE",
            f"/api/v1/namespaces/{self.ns}/pods",
            query={"labelSelector": f"txd.dev/app-id={self.name}", "gracePeriodSeconds": 0},
        )


class StatusStream:
    """One app's statuses as a txd client's Watch brings them, read by a task of its own."""

    def __init__(self, client: Any, handle: str) -> None:
        self.client, self.handle = client, handle
        self.seen: list[AppStatus] = []
        self._new = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self.ended = False

    async def __aenter__(self) -> StatusStream:
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _read(self) -> None:
        try:
            async for status in self.client.watch(self.handle):
                async with self._new:
                    self.seen.append(status)
                    self._new.notify_all()
        finally:
            async with self._new:
                self.ended = True
                self._new.notify_all()

    def states(self) -> list[str]:
        return [f"{AppState.Name(s.state)} ({s.msg})" for s in self.seen]

    async def until(self, state: AppState, msg: str = "") -> AppStatus:
        """The first status from the latest one on in `state` whose message contains `msg`."""
        return await self.wait(
            lambda s: s.state == state and msg in s.msg, f"{AppState.Name(state)} {msg!r}"
        )

    async def replicas(self, state: AppState) -> AppStatus:
        """The first status from the latest one on in which every replica is in `state`."""

        def every(s: AppStatus) -> bool:
            reps = [r for role in s.roles for r in role.replicas]
            return bool(reps) and all(r.state == state for r in reps)

        return await self.wait(every, f"every replica {AppState.Name(state)}")

    async def wait(self, done: Callable[[AppStatus], bool], what: str) -> AppStatus:
        start = max(len(self.seen) - 1, 0)
        try:
            async with asyncio.timeout(STATUS_TIMEOUT), self._new:
                while True:
                    hit = next((s for s in self.seen[start:] if done(s)), None)
                    if hit is not None:
                        return hit
                    assert not self.ended, f"the watch ended before {what}: {self.states()}"
                    await self._new.wait()
        except TimeoutError:
            raise AssertionError(f"not {what} within {STATUS_TIMEOUT} s: {self.states()}") from None


@dataclass(frozen=True)
class Kind:
    """How a played controller reads and moves one kind of object."""

    collection: str  # VOLCANO_JOBS or an APPWRAPPERS entry
    phase_path: tuple[str, ...]  # where the phase is in status
    running: str
    succeeded: str
    failed: str
    aborted: str  # the phase after which the controller deletes the pods ("" for none)

    @property
    def resource(self) -> str:
        """kubectl's name of the kind: `<plural>.<group>`."""
        parts = self.collection.split("/")  # /apis/<group>/<version>/namespaces/{ns}/<plural>
        return f"{parts[-1]}.{parts[2]}"

    def phase(self, obj: dict[str, Any]) -> str:
        value: Any = obj.get("status") or {}
        for key in self.phase_path:
            value = (value or {}).get(key)
        return str(value or "")

    def status(self, phase: str) -> dict[str, Any]:
        out: dict[str, Any] = {self.phase_path[-1]: phase}
        for key in reversed(self.phase_path[:-1]):
            out = {key: out}
        return out


VOLCANO = Kind(VOLCANO_JOBS, ("state", "phase"), "Running", "Completed", "Failed", "Aborted")
SUSPENDED = "Suspended"  # a v1beta2 AppWrapper's phase once suspended: no pods
APPWRAPPER = Kind(
    APPWRAPPERS["workload.codeflare.dev/v1beta2"], ("phase",), "Running", "Succeeded", "Failed", ""
)


class PlayedController:
    """Volcano's or MCAD's controller for every object of one kind in a namespace with label
    `selector`, played: a new object gets its pods (Controller.volcano_pods or
    appwrapper_items) and phase running; once every pod has succeeded it is succeeded, once
    one has failed it is failed; in the aborted phase its pods are deleted; a suspended
    AppWrapper (spec.suspend) loses its pods and gets none. Run `run()` as a
    task; it reconciles an object on each change of it or its pods (two informers)."""

    def __init__(self, kube: Kube, ns: str, kind: Kind, selector: str) -> None:
        self.kube, self.ns, self.kind, self.selector = kube, ns, kind, selector
        # What this controller did to each object, as a controller remembers it: the
        # informer's copy may not show it yet when the next event comes.
        self._phase: dict[str, str] = {}

    async def run(self) -> None:
        queue: asyncio.Queue[str] = asyncio.Queue()
        objects = Informer(self.kube, self.kind.collection.format(ns=self.ns), self.selector, "x")
        pods = Informer(self.kube, f"/api/v1/namespaces/{self.ns}/pods", self.selector, "pods")
        feeds = [asyncio.create_task(self._feed(i, queue)) for i in (objects, pods)]
        loop = asyncio.get_running_loop()
        try:
            while True:
                name = await queue.get()
                obj = objects.store.get(name)
                if obj is None:
                    continue
                mine = [
                    p
                    for p in pods.store.values()
                    if p["metadata"]["labels"].get("txd.dev/app-id") == name
                ]
                try:
                    await self._reconcile(obj, mine)
                except KubeError:  # a newer version of it (409), or the apiserver is down
                    loop.call_later(0.2, queue.put_nowait, name)
        finally:
            for task in feeds:
                task.cancel()
            await asyncio.gather(*feeds, return_exceptions=True)

    @staticmethod
    async def _feed(informer: Informer, queue: asyncio.Queue[str]) -> None:
        """The app ids of the informer's changes, and of everything it holds once it has
        listed (an object made before the first list comes as no change: a controller
        reconciles what it finds at start); while the apiserver is down (a test taking the
        backend down), it tries again, as a controller would."""

        def app_id(obj: dict[str, Any]) -> str:
            return str((obj["metadata"].get("labels") or {}).get("txd.dev/app-id", ""))

        for _ in range(1000):
            try:
                async with contextlib.aclosing(informer.events()) as events:
                    async for item in events:
                        if isinstance(item, Event):
                            queue.put_nowait(app_id(item.obj))
                        else:  # SYNCED
                            for obj in list(informer.store.values()):
                                queue.put_nowait(app_id(obj))
            except KubeError:
                await asyncio.sleep(1)

    async def _reconcile(self, obj: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        name = obj["metadata"]["name"]
        c = Controller(self.kube, self.ns, self.kind.collection, name)
        phase = self.kind.phase(obj)
        if phase in ("", self.kind.running):
            phase = self._phase.get(name, phase)  # what this controller last set
        if (obj.get("spec") or {}).get("suspend"):  # an AppWrapper (v1beta2) suspended
            if pods:
                await c.delete_pods()
            if phase != SUSPENDED:
                await self._set(c, obj, SUSPENDED)
        elif not phase:
            if self.kind is VOLCANO:
                await c.volcano_pods()
            else:
                await c.appwrapper_items()
            await self._set(c, obj, self.kind.running)
        elif phase == self.kind.running and pods:
            phases = [(p.get("status") or {}).get("phase") for p in pods]
            if "Failed" in phases:
                await self._set(c, obj, self.kind.failed)
            elif phases.count("Succeeded") == _pods_wanted(obj):
                await self._set(c, obj, self.kind.succeeded)
        elif phase == self.kind.aborted and pods:
            await c.delete_pods()

    async def _set(self, c: Controller, obj: dict[str, Any], phase: str) -> None:
        await c.set_status(self.kind.status(phase), obj["metadata"]["resourceVersion"])
        self._phase[c.name] = phase


def _pods_wanted(obj: dict[str, Any]) -> int:
    """How many pods a Volcano Job's tasks or an AppWrapper's items make."""
    spec = obj["spec"]
    if "tasks" in spec:
        return sum(int(t.get("replicas", 1)) for t in spec["tasks"])
    items = [c["template"] for c in spec.get("components", [])] or [
        g["generictemplate"] for g in spec["resources"]["GenericItems"]
    ]
    return sum(o["kind"] == "Pod" for o in items)


def gated(tag: str, name: str, gate: Path, replicas: int, tail: str = "") -> Role:
    """A role whose replicas write `<tag> <replica id>`, wait for <gate>/go (a host directory
    mounted at /gate), then run `tail` (exit 0 if empty): the test moves the controller's
    phases while they wait."""
    script = (
        f'{EXIT_ON_TERM}echo "{tag} ${{replica_id}}"; '
        "while [ ! -e /gate/go ]; do sleep 0.05; done; "
        f"{tail or 'true'}"
    )
    role = Role(
        name=name, image=BUSYBOX, entrypoint="sh", args=["-c", script], num_replicas=replicas
    )
    role.mounts.append(Mount(bind=BindMount(src_path=str(gate), dst_path="/gate")))
    return role
