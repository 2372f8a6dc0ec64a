"""kubernetes_mcad: the kubernetes scheduler's pods wrapped in an MCAD AppWrapper.

The AppWrapper (workload.codeflare.dev/v1beta2 by default, mcad.ibm.com/v1beta1 for older
installations: the `appwrapper_version` option) holds a Pod per replica, named with its role
(TorchX's `<id>-<k>` collides across roles), the headless Service and, with a coscheduler, a
PodGroup per role (txd.schedulers.kubernetes.crds). Status comes from the same single watch per
namespace and kind as kubernetes', with every AppWrapper phase mapped (kubernetes.status).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from txd.schedulers.api import Job
from txd.schedulers.kubernetes import crds, names
from txd.schedulers.kubernetes.kubernetes import KubernetesScheduler
from txd.schedulers.kubernetes.opts import McadOpts
from txd.schedulers.kubernetes.status import CANCELLED_ANNOTATION
from txd.schedulers.kubernetes.watching import PODS, SERVICES, Collection

NAME = "kubernetes_mcad"
APPWRAPPERS = [Collection(api, "appwrappers") for api in crds.APPWRAPPER_APIS.values()]


class McadScheduler(KubernetesScheduler):
    name = NAME
    description = "Kubernetes: the pods of an app in an MCAD AppWrapper, one watch for all"
    Opts: ClassVar[type] = McadOpts

    async def _objects(
        self,
        app: Any,
        name: str,
        opts: Any,
        kw: dict[str, str],
        *,
        version: tuple[int, int] | None = None,
    ) -> tuple[str, list[dict[str, Any]]]:
        # The AppWrapper's shape does not depend on the server's version (appwrapper_version
        # picks the API), so a dry run needs nothing from the cluster but the namespace.
        return "appwrapper", crds.appwrapper_objects(app, name, opts, **kw)

    def _listed_owners(self) -> Sequence[Collection]:
        return APPWRAPPERS

    async def cancel(self, job: Job) -> None:
        """The AppWrapper is marked cancelled (it stays, as the record) and its pods go."""
        if not job.native.get("name") or await self._ended(job):
            return
        ns, name = str(job.native["namespace"]), str(job.native["name"])
        owners = self._owners(job)
        patch: dict[str, Any] = {"metadata": {"annotations": {CANCELLED_ANNOTATION: "true"}}}
        if owners.api.endswith("/v1beta2"):
            # The AppWrapper controller removes a suspended wrapper's pods and makes no more
            # (v1beta1's MCAD has no such switch: a wrapper it dispatches later runs).
            patch["spec"] = {"suspend": True}
        found = await self._call(
            "PATCH",
            owners.path(ns, name),
            body=patch,
            content_type="application/merge-patch+json",
            missing_ok=True,
        )
        if found:
            await self._delete_labelled(ns, name, [PODS])

    async def delete(self, job: Job) -> None:
        await super().delete(job)
        if not job.native.get("name"):
            return
        # MCAD v1beta1 deletes what it wrapped itself, without owner references: so does txd.
        await self._delete_labelled(
            str(job.native["namespace"]), str(job.native["name"]), [PODS, SERVICES]
        )

    async def _delete_labelled(self, ns: str, name: str, colls: list[Collection]) -> None:
        query = {"labelSelector": f"{names.APP_ID_LABEL}={name}"}
        for coll in colls:
            if coll == SERVICES:  # services have no deletecollection: one by one
                found = await self._call("GET", coll.path(ns), query=query)
                for obj in found.get("items") or []:
                    await self._call(
                        "DELETE", coll.path(ns, obj["metadata"]["name"]), missing_ok=True
                    )
            else:
                await self._call("DELETE", coll.path(ns), query=query, missing_ok=True)


def create_scheduler(session_name: str, **kwargs: Any) -> McadScheduler:
    return McadScheduler(session_name, kwargs.get("settings"))
