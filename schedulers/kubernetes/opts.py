"""The run options (a Run's cfg) of the schedulers kubernetes (`KubernetesOpts`) and
kubernetes_mcad (`McadOpts`); txd.schedulers.kubernetes.objects and crds build from them."""

from __future__ import annotations

from dataclasses import dataclass

from txd.schedulers.options import opt

NAMESPACE_HELP = (
    "the namespace of the job's objects (default: the daemon's namespace setting, else the "
    "kubeconfig context's; TorchX's is `default`; a dry run names the one it uses and why)"
)
EXPAND_VARS_HELP = (
    "let Kubernetes expand $(VAR) in the containers' command, args and env, as under TorchX "
    "(default: off: every $ is passed on as given)"
)


@dataclass
class KubernetesOpts:
    namespace: str = opt("", NAMESPACE_HELP)
    queue: str | None = opt(
        None, "a Volcano queue: run as one Volcano Job, as TorchX (default: plain batch/v1 Jobs)"
    )
    service_account: str | None = opt(None, "the service account of every pod")
    priority_class: str | None = opt(None, "the PriorityClass of every pod")
    image_repo: str | None = opt(
        None, "with a workspace: push its image to this repository (e.g. registry:5000/me/app)"
    )
    host_network: bool = opt(False, "run the pods in the node's network namespace")
    image_pull_policy: str | None = opt(
        None, "the containers' imagePullPolicy: Always, IfNotPresent or Never"
    )
    image_secret: str | None = opt(None, "the name of an image pull secret for every pod")
    node_selector: dict[str, str] = opt({}, "node labels every pod requires (label:value,...)")
    tolerations: list[str] = opt(
        [], "taints every pod tolerates: key=value:Effect, key:Effect (any value) or key"
    )
    server_version: str | None = opt(
        None,
        "build for this Kubernetes version, MAJOR.MINOR: before 1.21 a Job per replica, else "
        "an Indexed Job per role (default: the API server's; a dry run that cannot ask it "
        "assumes 1.21 and says so)",
    )
    expand_vars: bool = opt(False, EXPAND_VARS_HELP)


@dataclass
class McadOpts:
    namespace: str = opt("", NAMESPACE_HELP)
    image_repo: str | None = opt(
        None, "with a workspace: push its image to this repository (e.g. registry:5000/me/app)"
    )
    service_account: str | None = opt(None, "the service account of every pod")
    priority: int | None = opt(
        None, "the AppWrapper's priority, higher first (AppWrapper v1beta1 only)"
    )
    priority_class_name: str | None = opt(None, "the PriorityClass of every pod")
    image_secret: str | None = opt(None, "the name of an image pull secret for every pod")
    coscheduler_name: str | None = opt(
        None, "a coscheduler: every pod gets this schedulerName and each role a PodGroup"
    )
    network: str | None = opt(
        None, "an additional pod network (the Multus annotation k8s.v1.cni.cncf.io/networks)"
    )
    host_network: bool = opt(False, "run the pods in the node's network namespace")
    image_pull_policy: str | None = opt(
        None, "the containers' imagePullPolicy: Always, IfNotPresent or Never"
    )
    appwrapper_version: str = opt(
        "",
        "the AppWrapper API: workload.codeflare.dev/v1beta2 (the AppWrapper controller; v1beta2 "
        "for short), workload.codeflare.dev/v1beta1 (MCAD >= 1.34, TorchX 0.7's) or "
        "mcad.ibm.com/v1beta1 (older MCAD) (default: the one the cluster serves; a dry run that "
        "cannot ask it assumes TorchX's and says so)",
    )
    expand_vars: bool = opt(False, EXPAND_VARS_HELP)
