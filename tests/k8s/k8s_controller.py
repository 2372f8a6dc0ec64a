"""The test as the controller the test cluster lacks (importable as `k8s_controller`): Volcano's
and MCAD's controllers are not installed (only their CRDs), so a test makes the pods they would
make from a Volcano Job's tasks or an AppWrapper's items, owned by that object, and moves the
object through its phases by patching its status subresource, as they would.

`StatusStream` follows one app's status as txd pushes it, so a test waits for the state each
phase maps to (ordered by events, never by sleeping).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Callable
from typing import Any

from txd.schedulers.k8s_api import Kube
from txd.v1 import AppState, AppStatus

VOLCANO_JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs"
APPWRAPPERS = {
    "v1beta2": "/apis/workload.codeflare.dev/v1beta2/namespaces/{ns}/appwrappers",
    "v1beta1": "/apis/mcad.ibm.com/v1beta1/namespaces/{ns}/appwrappers",
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
            out.append(await self.kube.request("POST", path, body=obj))
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

    async def set_status(self, status: dict[str, Any]) -> dict[str, Any]:
        """Merges `status` into the object's status through the status subresource."""
        return await self.kube.request(
            "PATCH",
            f"{self.path}/status",
            body={"status": status},
            content_type="application/merge-patch+json",
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
