"""AppDef -> Kubernetes objects: pure builders, no I/O (the schedulers kubernetes and
kubernetes_mcad send what these return; DryRun prints it).

Objects are plain JSON dicts, as the apiserver speaks them, in creation order: the root first.
Shapes:
- `plain_objects`: a headless Service (the root) and one batch/v1 Job per replica, so each
  replica has its own args and env (as TorchX makes one Volcano task per replica); works on
  every Kubernetes from 1.20 on.
- `indexed_objects`: the Service and one Indexed Job per role (completionMode, Kubernetes >=
  1.21): the replica id comes from the downward API, so `${replica_id}` becomes
  `$(JOB_COMPLETION_INDEX)`, which Kubernetes expands in args and env (every `$` of the
  app's own is doubled, so Kubernetes passes its values on as given: `_literal`; the
  expand_vars option leaves them to Kubernetes' `$(VAR)` expansion, as TorchX does).
The Volcano Job and MCAD AppWrapper shapes wrap these pods (txd.schedulers.kubernetes.crds).

Every object carries txd's labels and TorchX's (TorchX's managed-by, app name and instance;
per replica also TorchX's pod labels and txd's role and replica id); the root is annotated with
the app's shape (`txd.dev/roles`): txd.schedulers.kubernetes.names.
Objects carry no namespace: the scheduler posts them to a namespaced URL.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from txd.schedulers.api import Macros, num_replicas
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.kubernetes.names import (
    APP_ID_LABEL,
    MAX_NAME,
    ROLES_ANNOTATION,
    app_labels,
    check_label,
    dns_name,
    replica_labels,
    role_dns,
    roles_json,
    root_meta,
)
from txd.schedulers.kubernetes.opts import KubernetesOpts, McadOpts
from txd.v1.app_pb2 import AppDef, Role

Obj = dict[str, Any]

RANK0_ENV = "TORCHX_RANK0_HOST"
DEFAULT_PORT = 29500  # TorchX's c10d port, the Service's when no role names one
# TorchX assumes whole hosts and requests a little less than asked, leaving room for what a
# node reserves for itself: limits are what was asked, requests this much less (floored at 0).
RESERVED_MILLICPU = 100
RESERVED_MEMMB = 1024
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
COMPLETION_INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# TorchX's env rule: a value starting with this is a downward-API field path, not a value.
FIELD_PATH = "[FIELD_PATH]"

MULTUS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
# A sidecar that never exits would keep every replica's pod running after its program ended.
ISTIO_ANNOTATION = "sidecar.istio.io/inject"

_PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?")
_EXTENDED = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_TOLERATION = re.compile(r"(?P<key>[^=:]+)(=(?P<value>[^:]*))?(:(?P<effect>\w+))?")


@dataclass(frozen=True)
class _Pods:
    """What a pod spec takes from either option set."""

    service_account: str | None = None
    priority_class: str | None = None
    image_pull_policy: str | None = None
    image_secret: str | None = None
    node_selector: Mapping[str, str] | None = None
    tolerations: Sequence[str] = ()
    host_network: bool = False
    scheduler_name: str | None = None
    network: str | None = None
    expand_vars: bool = False


def _pods(opts: KubernetesOpts | McadOpts) -> _Pods:
    if opts.image_pull_policy is not None and opts.image_pull_policy not in PULL_POLICIES:
        raise InvalidArgument(
            "cfg.image_pull_policy",
            f"expected one of {', '.join(PULL_POLICIES)}, got {opts.image_pull_policy!r}",
        )
    if isinstance(opts, KubernetesOpts):
        for key, value in opts.node_selector.items():
            check_label("cfg.node_selector", key, value)
        return _Pods(
            service_account=opts.service_account,
            priority_class=opts.priority_class,
            image_pull_policy=opts.image_pull_policy,
            image_secret=opts.image_secret,
            node_selector=opts.node_selector,
            tolerations=opts.tolerations,
            host_network=opts.host_network,
            expand_vars=opts.expand_vars,
        )
    return _Pods(
        service_account=opts.service_account,
        priority_class=opts.priority_class_name,
        image_pull_policy=opts.image_pull_policy,
        image_secret=opts.image_secret,
        host_network=opts.host_network,
        scheduler_name=opts.coscheduler_name,
        network=opts.network,
        expand_vars=opts.expand_vars,
    )


# -- pods --------------------------------------------------------------------------------------


def _quantities(role: Role, path: str) -> tuple[dict[str, str], dict[str, str]]:
    """(limits, requests) from the role's Resource, with TorchX's arithmetic."""
    res = role.resource
    for name in ("cpu", "gpu", "mem_mb"):
        if getattr(res, name) < 0:
            raise InvalidArgument(
                f"{path}.resource.{name}", f"must be >= 0, got {getattr(res, name)}"
            )
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if res.cpu > 0:
        limits["cpu"] = f"{res.cpu * 1000}m"
        requests["cpu"] = f"{max(res.cpu * 1000 - RESERVED_MILLICPU, 0)}m"
    if res.mem_mb > 0:  # TorchX writes MiB with the suffix M (10^6 bytes): kept for parity
        limits["memory"] = f"{res.mem_mb}M"
        requests["memory"] = f"{max(res.mem_mb - RESERVED_MEMMB, 0)}M"
    if res.gpu > 0:
        limits["nvidia.com/gpu"] = requests["nvidia.com/gpu"] = str(res.gpu)
    for device, count in sorted(res.devices.items()):
        field = f"{path}.resource.devices[{device!r}]"
        if not _EXTENDED.fullmatch(device) or device.split("/")[0].endswith("kubernetes.io"):
            raise InvalidArgument(field, "not an extended resource name (domain/name)")
        if count < 1:
            raise InvalidArgument(field, f"must be >= 1, got {count}")
        limits[device] = str(count)  # extended resources: requests default to limits
    return limits, requests


def _volumes(role: Role, path: str) -> tuple[list[Obj], list[Obj], bool]:
    """(volumes, volume mounts, privileged): /dev/shm as TorchX makes it (a tmpfs as big as the
    pod may use: PyTorch's data loaders outgrow the runtime's 64 MB), then the role's mounts."""
    volumes: list[Obj] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    mounts: list[Obj] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    privileged = False
    for i, m in enumerate(role.mounts):
        name, field = f"mount-{i}", f"{path}.mounts[{i}]"
        kind = m.WhichOneof("kind")
        if kind == "bind":
            src, dst, ro = m.bind.src_path, m.bind.dst_path, m.bind.read_only
            source: Obj = {"hostPath": {"path": _absolute(src, f"{field}.bind.src_path")}}
        elif kind == "volume":
            if not m.volume.src:
                raise InvalidArgument(f"{field}.volume.src", "the claim's name is required")
            dst, ro = m.volume.dst_path, m.volume.read_only
            source = {"persistentVolumeClaim": {"claimName": m.volume.src}}
        elif kind == "device":
            # Kubernetes has no --device: a device is a hostPath in a privileged container.
            src = _absolute(m.device.src_path, f"{field}.device.src_path")
            dst = m.device.dst_path or src
            perms = m.device.permissions or "rwm"
            ro = "w" not in perms and "m" not in perms
            source = {"hostPath": {"path": src}}
            privileged = True
        else:
            raise InvalidArgument(field, "a mount of no kind (bind, volume or device)")
        volumes.append({"name": name, **source})
        mounts.append({"name": name, "mountPath": _absolute(dst, f"{field}.{kind}.dst_path")})
        if ro:
            mounts[-1]["readOnly"] = True
    return volumes, mounts, privileged


def _absolute(p: str, field: str) -> str:
    if not p.startswith("/"):
        raise InvalidArgument(field, f"must be an absolute path, got {p!r}")
    return p


# ${replica_id} of an Indexed Job's replica while its strings are built (NUL-delimited: no
# value holds NUL, validate.py); then `$(JOB_COMPLETION_INDEX)`, for Kubernetes to expand.
_REPLICA_MARK = "\0replica\0"


def _literal(text: str, expand: bool = False) -> str:
    """text as Kubernetes must pass it on: it expands `$(VAR)` and turns `$$` into `$` in a
    container's command, args and env values, so each `$` of ours is doubled; unless
    `expand`: then Kubernetes expands the text's `$(VAR)` references (TorchX's behaviour)."""
    if not expand:
        text = text.replace("$", "$$")
    return text.replace(_REPLICA_MARK, f"$({COMPLETION_INDEX})")


def mcad_hosts_env(role_name: str) -> str:
    """TorchX's name of the env var holding a role's replica 0 address on kubernetes_mcad:
    TORCHX_MCAD_<ROLE>_0_HOSTS, ROLE the role's DNS name without leading digits nor '-',
    upper-cased (TorchX's cleanup_str, then upper() and '-' dropped)."""
    cleaned = dns_name(role_name).lstrip("0123456789")
    return f"TORCHX_MCAD_{cleaned.upper().replace('-', '')}_0_HOSTS"


_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _env_order(env: Mapping[str, str]) -> list[str]:
    """The names by name, but each after the ones its value references as `$(NAME)`:
    Kubernetes expands a reference only to a variable listed before it (cycles as found)."""
    out: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for ref in sorted(set(_VAR_REF.findall(env[name]))):
            if ref in env:
                visit(ref)
        out.append(name)

    for name in sorted(env):
        visit(name)
    return out


def _env(env: Mapping[str, str], expand: bool = False) -> list[Obj]:
    out: list[Obj] = []
    for name in _env_order(env) if expand else sorted(env):
        value = env[name]
        if value.startswith(FIELD_PATH):  # TorchX strips with str.strip (characters): a prefix
            path = value.removeprefix(FIELD_PATH)
            out.append({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
        else:
            out.append({"name": name, "value": value})
    return out


def _tolerations(specs: Sequence[str]) -> list[Obj]:
    out = []
    for text in specs:
        m = _TOLERATION.fullmatch(text.strip())
        effect = m and m.group("effect")
        if m is None or (effect and effect not in EFFECTS):
            raise InvalidArgument(
                "cfg.tolerations",
                f"expected key=value:Effect, key:Effect or key (Effect: {', '.join(EFFECTS)}), "
                f"got {text!r}",
            )
        t: Obj = {"key": m.group("key").strip()}
        if m.group("value") is None:
            t["operator"] = "Exists"
        else:
            t["operator"], t["value"] = "Equal", m.group("value")
        if effect:
            t["effect"] = effect
        out.append(t)
    return out


def _ports(role: Role, path: str) -> list[Obj]:
    out = []
    for name, port in sorted(role.port_map.items(), key=lambda kv: kv[1]):
        if not _PORT_NAME.fullmatch(name) or not re.search("[a-z]", name):
            raise InvalidArgument(
                f"{path}.port_map[{name!r}]",
                "a Kubernetes port name is 1-15 of [a-z0-9-] with a letter, not starting or "
                "ending with '-'",
            )
        if not 0 < port < 65536:
            raise InvalidArgument(f"{path}.port_map[{name!r}]", f"must be in 1..65535, got {port}")
        out.append({"name": name, "containerPort": port})
    return out


def pod_spec(
    app: AppDef,
    i: int,
    k: int | None,
    app_id: str,
    opts: KubernetesOpts | McadOpts,
    *,
    scheduler: str,
    session: str,
    shape: str = "plain",
) -> Obj:
    """The pod template (metadata and spec) of replica k of role i; k None: every replica of an
    Indexed Job. shape (plain, indexed, volcano, mcad) decides how replicas find rank 0:
    TORCHX_RANK0_HOST, `localhost` on rank 0 itself (as TorchX), else rank 0's name under the
    headless Service; on Volcano the other replicas read what Volcano's svc plugin sets; on
    MCAD, as TorchX, TORCHX_MCAD_<ROLE>_0_HOSTS (set on every pod for its own role and role
    0: TorchX sets only its own role's, which leaves other roles' rank0_env unset)."""
    role, path, pods = app.roles[i], f"app.roles[{i}]", _pods(opts)
    if not role.image:
        raise InvalidArgument(f"{path}.image", "Kubernetes runs images: set the role's image")
    if not role.entrypoint:
        raise InvalidArgument(f"{path}.entrypoint", "required")
    dns, rank0_dns = role_dns(app, i), role_dns(app, 0)
    is_rank0 = i == 0 and k == 0
    env: dict[str, str] = {}
    if shape == "volcano":
        # Volcano's svc plugin names it VC_<TASK>_HOSTS with the task name upper-cased and every
        # '-' as '_'; TorchX keeps the '-' (VC_MY-ROLE_0_HOSTS for role my-role): never set.
        rank0_env = "VC_" + f"{rank0_dns}-0".replace("-", "_").upper() + "_HOSTS"
        name = f"{dns}-{k}"  # the task name, as TorchX names the container
    elif shape == "indexed":
        rank0_env = RANK0_ENV
        env[RANK0_ENV] = f"{app_id}-{rank0_dns}-0.{app_id}"  # Indexed pods: <job>-<index>
        name = dns
    elif shape == "mcad":
        rank0_env = mcad_hosts_env(app.roles[0].name)
        env[mcad_hosts_env(role.name)] = f"{dns}-0.{app_id}"
        env[rank0_env] = f"{rank0_dns}-0.{app_id}"  # role 0's wins a name both map to
        name = f"{dns}-{k}"
    else:
        rank0_env = RANK0_ENV
        env[RANK0_ENV] = f"{rank0_dns}-0.{app_id}"
        name = f"{dns}-{k}"
    if is_rank0:
        rank0_env = RANK0_ENV
        env[RANK0_ENV] = "localhost"
    replica_id = _REPLICA_MARK if k is None else str(k)
    r = Macros(img_root="", app_id=app_id, replica_id=replica_id, rank0_env=rank0_env).apply(role)
    env = {**{key: _literal(value, pods.expand_vars) for key, value in r.env.items()}, **env}
    volumes, mounts, privileged = _volumes(r, path)
    limits, requests = _quantities(r, path)
    container: Obj = {
        "name": name,
        "image": r.image,
        "command": [_literal(word, pods.expand_vars) for word in (r.entrypoint, *r.args)],
        "env": _env(env, pods.expand_vars),
        "resources": {"limits": limits, "requests": requests},
        "volumeMounts": mounts,
    }
    # With hostNetwork a declared port is a host port the scheduler reserves: replicas that
    # declare the same one could never share a node, though only rank 0 listens on it.
    if not pods.host_network:
        container["ports"] = _ports(r, path)
    if k is None:  # first, so that the others may use $(JOB_COMPLETION_INDEX)
        index = {"fieldRef": {"fieldPath": COMPLETION_INDEX_PATH}}
        container["env"].insert(0, {"name": COMPLETION_INDEX, "valueFrom": index})
    if pods.image_pull_policy:
        container["imagePullPolicy"] = pods.image_pull_policy
    if privileged:
        container["securityContext"] = {"privileged": True}
    spec: Obj = {"containers": [container], "restartPolicy": "Never", "volumes": volumes}
    if shape in ("plain", "mcad"):
        spec["hostname"], spec["subdomain"] = f"{dns}-{k}", app_id
    elif shape == "indexed":
        spec["subdomain"] = app_id  # the Job controller names the host <job>-<index>
    selector = dict(pods.node_selector or {})
    if INSTANCE_TYPE in role.resource.capabilities:
        selector[INSTANCE_TYPE] = role.resource.capabilities[INSTANCE_TYPE]
    optional: dict[str, Any] = {
        "serviceAccountName": pods.service_account,
        "priorityClassName": pods.priority_class,
        "schedulerName": pods.scheduler_name,
        "imagePullSecrets": [{"name": pods.image_secret}] if pods.image_secret else None,
        "nodeSelector": selector or None,
        "tolerations": _tolerations(pods.tolerations) or None,
    }
    spec.update({key: value for key, value in optional.items() if value})
    if pods.host_network:
        # ClusterFirstWithHostNet: the pod still resolves the cluster's names (rank 0's).
        spec["hostNetwork"], spec["dnsPolicy"] = True, "ClusterFirstWithHostNet"
    annotations = {ISTIO_ANNOTATION: "false"}
    if pods.network:
        annotations[MULTUS_ANNOTATION] = pods.network
    labels = replica_labels(app_labels(app, scheduler, session, app_id), app, i, k)
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}


def check_app(app: AppDef, app_id: str) -> None:
    if not app.roles:
        raise InvalidArgument("app.roles", "an app needs at least one role")
    for i, role in enumerate(app.roles):
        longest = f"{app_id}-{role_dns(app, i)}-{num_replicas(role) - 1}"
        if len(longest) > MAX_NAME:
            raise InvalidArgument(
                f"app.roles[{i}].name",
                f"too long for Kubernetes names: {longest!r} has more than {MAX_NAME} characters",
            )
        if num_replicas(role) < 1:
            raise InvalidArgument(f"app.roles[{i}].num_replicas", "must be >= 1")
        if role.max_retries < 0:
            raise InvalidArgument(f"app.roles[{i}].max_retries", "must be >= 0")


# -- the headless Service ----------------------------------------------------------------------


def headless_service(app: AppDef, app_id: str, labels: Mapping[str, str]) -> Obj:
    """The app's headless Service: `<role>-<k>.<app_id>` (the pods' hostname.subdomain) resolves
    to each replica, before it is ready too (rendezvous happens before readiness)."""
    ports: list[Obj] = []
    names: set[str] = set()
    seen: set[int] = set()
    for i, role in enumerate(app.roles):
        for p in _ports(role, f"app.roles[{i}]"):
            if p["containerPort"] in seen:
                continue
            seen.add(p["containerPort"])
            name = p["name"] if p["name"] not in names else f"port-{p['containerPort']}"
            names.add(name)
            ports.append({"name": name, "port": p["containerPort"], "protocol": "TCP"})
    if not ports:
        ports = [{"name": "c10d", "port": DEFAULT_PORT, "protocol": "TCP"}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": root_meta(app, app_id, labels),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {APP_ID_LABEL: app_id},
            "ports": ports,
        },
    }


# -- batch/v1 Jobs -----------------------------------------------------------------------------


def plain_objects(
    app: AppDef, app_id: str, opts: KubernetesOpts, *, scheduler: str, session: str
) -> list[Obj]:
    """The headless Service (root), then a batch/v1 Job `<app_id>-<role>-<k>` per replica;
    backoffLimit retries that replica's pod max_retries times."""
    check_app(app, app_id)
    labels = app_labels(app, scheduler, session, app_id)
    out = [headless_service(app, app_id, labels)]
    for i, role in enumerate(app.roles):
        for k in range(num_replicas(role)):
            template = pod_spec(app, i, k, app_id, opts, scheduler=scheduler, session=session)
            meta = {
                "name": f"{app_id}-{role_dns(app, i)}-{k}",
                "labels": replica_labels(labels, app, i, k),
                "annotations": {ROLES_ANNOTATION: roles_json(app)},
            }
            spec = {
                "backoffLimit": role.max_retries,
                "completions": 1,
                "parallelism": 1,
                "template": template,
            }
            out.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec})
    return out


def indexed_objects(
    app: AppDef, app_id: str, opts: KubernetesOpts, *, scheduler: str, session: str
) -> list[Obj]:
    """The headless Service (root), then an Indexed Job `<app_id>-<role>` per role (Kubernetes
    >= 1.21): one template for every replica, backoffLimit max_retries for each of them."""
    check_app(app, app_id)
    labels = app_labels(app, scheduler, session, app_id)
    out = [headless_service(app, app_id, labels)]
    for i, role in enumerate(app.roles):
        n = num_replicas(role)
        template = pod_spec(
            app, i, None, app_id, opts, scheduler=scheduler, session=session, shape="indexed"
        )
        meta = {
            "name": f"{app_id}-{role_dns(app, i)}",
            "labels": replica_labels(labels, app, i, None),
            "annotations": {ROLES_ANNOTATION: roles_json(app)},
        }
        spec = {
            "completionMode": "Indexed",
            "backoffLimit": role.max_retries * n,
            "completions": n,
            "parallelism": n,
            "template": template,
        }
        out.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec})
    return out


def owned(objects: Sequence[Obj], root: Obj, uid: str) -> list[Obj]:
    """Copies of the objects other than root, owned by it (root as created, with its uid), so
    that deleting the root garbage-collects them."""
    ref = {
        "apiVersion": root["apiVersion"],
        "kind": root["kind"],
        "name": root["metadata"]["name"],
        "uid": uid,
        "blockOwnerDeletion": True,
    }
    out = []
    for obj in objects:
        if (obj["kind"], obj["metadata"]["name"]) == (ref["kind"], ref["name"]):
            continue
        c = copy.deepcopy(obj)
        c["metadata"]["ownerReferences"] = [dict(ref)]
        out.append(c)
    return out


# -- YAML --------------------------------------------------------------------------------------


def render_yaml(objects: Sequence[Obj], header: str = "") -> str:
    """The objects as one YAML stream, `---` between them, in creation order; header, if any,
    as a comment line first."""
    docs = [
        yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=2**16)
        for obj in objects
    ]
    head = f"# {header}\n" if header else ""
    return head + "---\n".join(docs)
