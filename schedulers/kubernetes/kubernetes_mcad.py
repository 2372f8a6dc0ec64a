"""kubernetes_mcad: the kubernetes scheduler's pods wrapped in an MCAD AppWrapper.

The AppWrapper holds a Pod per replica, named with its role (TorchX's `<id>-<k>` collides
across roles), the headless Service and, with a coscheduler, a PodGroup per role
(txd.schedulers.kubernetes.crds). Its API is the `appwrapper_version` option's, else the one
the cluster serves (API discovery: workload.codeflare.dev/v1beta2 of the AppWrapper controller,
workload.codeflare.dev/v1beta1 of MCAD >= 1.34, which TorchX 0.7 emits, or older MCAD's
mcad.ibm.com/v1beta1); a dry run that cannot ask builds TorchX's and says so. Status comes
from the same single watch per namespace and kind as kubernetes', with every AppWrapper phase
mapped (kubernetes.status).
"""

from __future__ import annotations

import asyncio
import typing
from collections.abc import Sequence
from typing import Any, ClassVar

from txd.schedulers.api import Job
from txd.schedulers.errors import BackendUnavailable, InvalidArgument
from txd.schedulers.kubernetes import crds, names
from txd.schedulers.kubernetes.kubernetes import (
    KubernetesScheduler,
    KubeSettings,
    Offline,
    unavailable_reason,
)
from txd.schedulers.kubernetes.opts import McadOpts
from txd.schedulers.kubernetes.status import CANCELLED_ANNOTATION
from txd.schedulers.kubernetes.watching import PODS, SERVICES, Collection

NAME = "kubernetes_mcad"
APPWRAPPERS = [Collection(api, "appwrappers") for api in crds.APPWRAPPER_APIS]


class McadScheduler(KubernetesScheduler):
    name = NAME
    description = "Kubernetes: the pods of an app in an MCAD AppWrapper, one watch for all"
    Opts: ClassVar[type] = McadOpts

    def __init__(self, session_name: str, settings: Any = None) -> None:
        super().__init__(session_name, settings)
        self._served_api = ""  # the AppWrapper API discovery found (kept once found)

    async def _objects(
        self,
        app: Any,
        name: str,
        opts: Any,
        kw: dict[str, str],
        *,
        offline: bool = False,
    ) -> tuple[str, list[dict[str, Any]]]:
        """The AppWrapper of the option's API, else of the one the cluster serves (Offline
        when it cannot be asked; `offline`: TorchX's)."""
        api = crds.appwrapper_api(opts.appwrapper_version)
        if not api and offline:
            api = crds.DEFAULT_APPWRAPPER_API
        elif not api:
            try:
                api = await self._discovered_api()
            except BackendUnavailable as e:
                raise Offline(unavailable_reason(e, self.name)) from None
        return "appwrapper", crds.appwrapper_objects(app, name, opts, **kw, api=api)

    async def _discovered_api(self) -> str:
        """The AppWrapper API the cluster serves (GET /apis): of workload.codeflare.dev the
        group's preferred version among those txd knows, else mcad.ibm.com/v1beta1."""
        if not self._served_api:
            timeout = typing.cast(KubeSettings, self.settings).api_timeout
            try:
                async with asyncio.timeout(timeout):
                    groups = (await self._call("GET", "/apis")).get("groups") or []
            except TimeoutError:
                raise BackendUnavailable(
                    f"{self.name}: the Kubernetes API server did not answer GET /apis within "
                    f"{timeout:g} s"
                ) from None
            self._served_api = crds.served_appwrapper_api(groups)
        if self._served_api:
            return self._served_api
        raise InvalidArgument(
            "cfg.appwrapper_version",
            "the cluster serves no AppWrapper API (none of "
            f"{', '.join(crds.APPWRAPPER_APIS)}): install MCAD or the AppWrapper controller, "
            "or name the API to build for with -c appwrapper_version=API",
        )

    def _offline_note(self, shape: str, reason: str) -> str:
        return (
            f"the cluster could not be asked which AppWrapper API it serves ({reason}): built "
            f"for {crds.DEFAULT_APPWRAPPER_API} (TorchX 0.7's); choose with "
            "-c appwrapper_version=API"
        )

    def _listed_owners(self) -> Sequence[Collection]:
        return APPWRAPPERS

    async def cancel(self, job: Job) -> None:
        """The AppWrapper is marked cancelled (it stays, as the record) and its pods go."""
        if not job.native.get("name") or await self._ended(job):
            return
        ns, name = str(job.native["namespace"]), str(job.native["name"])
        owners = self._owners(job)
        patch: dict[str, Any] = {"metadata": {"annotations": {CANCELLED_ANNOTATION: "true"}}}
        if owners.api == crds.CODEFLARE_V1BETA2:
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
