"""AppDef -> the custom resources of the two controller shapes: a Volcano Job (kubernetes with
a `queue`) and an MCAD AppWrapper (kubernetes_mcad). Pure builders, no I/O, as
txd.schedulers.kubernetes.objects, whose pod specs, labels and headless Service they wrap.

- `volcano_objects`: one batch.volcano.sh/v1alpha1 Job with a task per replica, as TorchX.
- `appwrapper_objects`: one AppWrapper wrapping a Pod per replica, the headless Service and
  optional coscheduler PodGroups: workload.codeflare.dev/v1beta2 (components, for the
  AppWrapper controller), or the v1beta1 shape (GenericItems, schedulingSpec) that MCAD serves
  as workload.codeflare.dev/v1beta1 (MCAD >= 1.34, what TorchX 0.7 emits) and, before,
  mcad.ibm.com/v1beta1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from txd.schedulers.api import num_replicas
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.kubernetes.names import app_labels, role_dns, root_meta
from txd.schedulers.kubernetes.objects import (
    Obj,
    check_app,
    headless_service,
    pod_spec,
)
from txd.schedulers.kubernetes.opts import KubernetesOpts, McadOpts
from txd.v1.app_pb2 import AppDef

VOLCANO_API = "batch.volcano.sh/v1alpha1"
CODEFLARE_V1BETA2 = "workload.codeflare.dev/v1beta2"
CODEFLARE_V1BETA1 = "workload.codeflare.dev/v1beta1"
MCAD_V1BETA1 = "mcad.ibm.com/v1beta1"
# Every AppWrapper API txd builds for, in the order discovery prefers them (a cluster serves
# one version of workload.codeflare.dev; mcad.ibm.com is older MCAD's, maybe left beside it).
APPWRAPPER_APIS = (CODEFLARE_V1BETA2, CODEFLARE_V1BETA1, MCAD_V1BETA1)
# What a dry run that cannot ask the cluster builds for: TorchX 0.7's.
DEFAULT_APPWRAPPER_API = CODEFLARE_V1BETA1
_SHORT_APIS = {"v1beta2": CODEFLARE_V1BETA2}
PODGROUP_API = "scheduling.sigs.k8s.io/v1alpha1"
# AppWrapper v1beta2 takes its retry count from an annotation (v1beta1: schedulingSpec).
RETRY_LIMIT_ANNOTATION = "workload.codeflare.dev.appwrapper/retryLimit"
APPWRAPPER_LABEL = "appwrapper.workload.codeflare.dev"


# -- Volcano -----------------------------------------------------------------------------------

# TorchX's retry policies per Role.RetryPolicy (APPLICATION=0, REPLICA=1, ROLE=2). TorchX has no
# ROLE entry (a KeyError); Volcano's RestartTask restarts the failed replica's task.
_VOLCANO_POLICIES: dict[int, list[dict[str, str]]] = {
    0: [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "RestartJob"},
    ],
    1: [],
    2: [
        {"event": "PodEvicted", "action": "RestartTask"},
        {"event": "PodFailed", "action": "RestartTask"},
    ],
}


def volcano_objects(
    app: AppDef, app_id: str, opts: KubernetesOpts, *, scheduler: str, session: str
) -> list[Obj]:
    """One Volcano Job as TorchX makes it: a task `<role>-<k>` per replica (macros differ per
    replica), the svc and env plugins, maxRetry the smallest max_retries."""
    check_app(app, app_id)
    if not opts.queue:
        raise InvalidArgument("cfg.queue", "a Volcano Job needs a queue")
    labels = app_labels(app, scheduler, session, app_id)
    tasks = []
    for i, role in enumerate(app.roles):
        for k in range(num_replicas(role)):
            template = pod_spec(
                app, i, k, app_id, opts, scheduler=scheduler, session=session, shape="volcano"
            )
            task: Obj = {"replicas": 1, "name": f"{role_dns(app, i)}-{k}", "template": template}
            if role.max_retries > 0:
                task["maxRetry"] = role.max_retries
                task["policies"] = _VOLCANO_POLICIES[role.retry_policy]
            if role.HasField("min_replicas"):  # elastic: the first min_replicas are required
                task["minAvailable"] = 1 if k < role.min_replicas else 0
            tasks.append(task)
    spec: Obj = {
        "schedulerName": "volcano",
        "queue": opts.queue,
        # What Volcano's admission webhook would set: every task's minimum.
        "minAvailable": sum(t.get("minAvailable", 1) for t in tasks),
        "maxRetry": min(r.max_retries for r in app.roles),
        # svc: a headless Service and VC_<TASK>_HOSTS; publish before ready (volcano#533).
        "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
        "tasks": tasks,
    }
    if opts.priority_class:
        spec["priorityClassName"] = opts.priority_class
    return [
        {
            "apiVersion": VOLCANO_API,
            "kind": "Job",
            "metadata": root_meta(app, app_id, labels),
            "spec": spec,
        }
    ]


# -- MCAD AppWrapper ---------------------------------------------------------------------------


def appwrapper_api(version: str) -> str:
    """The AppWrapper API the appwrapper_version option names ("" for none: discovery's)."""
    text = version.strip()
    if not text or text in APPWRAPPER_APIS:
        return text
    if text in _SHORT_APIS:
        return _SHORT_APIS[text]
    why = f"expected one of {', '.join(APPWRAPPER_APIS)}"
    if text == "v1beta1":
        why = f"ambiguous: {CODEFLARE_V1BETA1} (MCAD >= 1.34, TorchX's) or {MCAD_V1BETA1}"
    raise InvalidArgument("cfg.appwrapper_version", f"{why}, got {version!r}")


def served_appwrapper_api(groups: Sequence[Mapping[str, Any]]) -> str:
    """The AppWrapper API a cluster serves, from its API groups (GET /apis' `groups`): of
    workload.codeflare.dev the group's preferred version among those txd knows, else
    mcad.ibm.com/v1beta1; "" when it serves none of them."""
    served: dict[str, list[str]] = {}
    for group in groups:
        preferred = str((group.get("preferredVersion") or {}).get("groupVersion", ""))
        versions = [str(v.get("groupVersion", "")) for v in group.get("versions") or []]
        served[str(group.get("name", ""))] = [preferred, *versions]
    for group_name in ("workload.codeflare.dev", "mcad.ibm.com"):
        for api in served.get(group_name, []):
            if api in APPWRAPPER_APIS:
                return api
    return ""


def appwrapper_objects(
    app: AppDef,
    app_id: str,
    opts: McadOpts,
    *,
    scheduler: str,
    session: str,
    api: str = "",
) -> list[Obj]:
    """One AppWrapper of `api` (default: the appwrapper_version option's, else TorchX's)
    wrapping, in order: a PodGroup per role (with a coscheduler), a Pod `<app_id>-<role>-<k>`
    per replica (TorchX's `<app_id>-<k>` collides across roles) and the headless Service."""
    check_app(app, app_id)
    api = appwrapper_api(api or opts.appwrapper_version) or DEFAULT_APPWRAPPER_API
    v1beta2 = api == CODEFLARE_V1BETA2
    if v1beta2 and opts.priority is not None:
        raise InvalidArgument(
            "cfg.priority", "AppWrapper v1beta2 has no priority: use priority_class_name"
        )
    labels = app_labels(app, scheduler, session, app_id)
    items: list[tuple[Obj, int]] = []  # (object, pods in it)
    if opts.coscheduler_name:
        for i, role in enumerate(app.roles):
            group = {
                "apiVersion": PODGROUP_API,
                "kind": "PodGroup",
                # TorchX's label of the AppWrapper a PodGroup belongs to, beside the app's.
                "metadata": {
                    "name": f"{app_id}-pg{i}",
                    "labels": {**labels, APPWRAPPER_LABEL: app_id},
                },
                "spec": {"minMember": num_replicas(role)},
            }
            items.append((group, 0))
    for i, role in enumerate(app.roles):
        for k in range(num_replicas(role)):
            pod = pod_spec(
                app, i, k, app_id, opts, scheduler=scheduler, session=session, shape="mcad"
            )
            pod["metadata"] = {"name": f"{app_id}-{role_dns(app, i)}-{k}", **pod["metadata"]}
            if opts.coscheduler_name:
                pod["metadata"]["labels"]["pod-group.scheduling.sigs.k8s.io"] = f"{app_id}-pg{i}"
            items.append(({"apiVersion": "v1", "kind": "Pod", **pod}, 1))
    service = headless_service(app, app_id, labels)
    service["metadata"].pop("annotations")  # the AppWrapper is the root
    items.append((service, 0))
    meta = root_meta(app, app_id, labels)
    retries = min(r.max_retries for r in app.roles)
    spec: Obj
    if v1beta2:
        meta["annotations"][RETRY_LIMIT_ANNOTATION] = str(retries)
        spec = {
            "components": [
                {"podSets": [{"replicas": 1, "path": "template"}] if n else [], "template": obj}
                for obj, n in items
            ]
        }
    else:
        spec = {
            "resources": {
                "GenericItems": [{"replicas": 1, "generictemplate": obj} for obj, _ in items]
            }
        }
        if opts.priority is not None:
            spec["priority"] = opts.priority
        if retries > 0:  # as TorchX: requeue the whole wrapper, with exponential back-off
            spec["schedulingSpec"] = {
                "minAvailable": sum(n for _, n in items),
                "requeuing": {
                    "timeInSeconds": 300,
                    "maxTimeInSeconds": 0,
                    "growthType": "exponential",
                    "maxNumRequeuings": retries,
                },
            }
    return [{"apiVersion": api, "kind": "AppWrapper", "metadata": meta, "spec": spec}]
