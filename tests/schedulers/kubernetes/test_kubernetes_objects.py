"""The Kubernetes objects txd builds (schedulers/kubernetes/objects.py, crds.py, names.py),
without a cluster: golden YAML for every shape, every object checked against a current Kubernetes
release's JSON schemas (kubernetes-validate, strict: an unknown field fails), TorchX parity,
and bad input.

The golden files are rewritten only by hand, never by a test run:
    cd tests/schedulers/kubernetes
    PYTHONPATH=. ../../../.venv/bin/python test_kubernetes_objects.py --update-golden
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from k8s_apps import APP_ID, SHAPES, build, two_role_app
from torchx.util.strings import normalize_str
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.kubernetes import crds, names
from txd.schedulers.kubernetes import objects as ko
from txd.schedulers.kubernetes.opts import McadOpts
from txd.v1.app_pb2 import AppDef, BindMount, Mount, Resource, Role, VolumeMount

GOLDEN = Path(__file__).with_name("golden")
K8S_VERSION = kubernetes_validate.latest_version()


def _golden_text(shape: str) -> str:
    return ko.render_yaml(build(shape, two_role_app()))


@pytest.mark.parametrize("shape", SHAPES)
def test_objects_match_the_golden_yaml(shape: str) -> None:
    expected = (GOLDEN / f"{shape}.yaml").read_text()
    assert _golden_text(shape) == expected
    # The YAML reads back as the very objects (what DryRun prints is what is sent).
    assert list(yaml.safe_load_all(expected)) == build(shape, two_role_app())


def _as_pods(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The Kubernetes objects inside a custom resource: Volcano task templates as Pods, an
    AppWrapper's wrapped objects as they are (its PodGroups are CRDs too: left out)."""
    if obj["kind"] == "AppWrapper":
        if "components" in obj["spec"]:
            inner = [c["template"] for c in obj["spec"]["components"]]
        else:
            inner = [g["generictemplate"] for g in obj["spec"]["resources"]["GenericItems"]]
        return [o for o in inner if o["kind"] != "PodGroup"]
    if obj["apiVersion"] == crds.VOLCANO_API:
        return [{"apiVersion": "v1", "kind": "Pod", **t["template"]} for t in obj["spec"]["tasks"]]
    return [obj]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_object_is_valid_for_a_current_kubernetes(shape: str) -> None:
    objects = build(shape, two_role_app())
    core = [o for obj in objects for o in _as_pods(obj)]
    expected = {"plain": 4, "indexed": 3, "volcano": 3, "appwrapper-v1beta2": 4}
    assert len(core) == expected.get(shape, 4)
    for obj in core:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{obj['kind']} {obj['metadata'].get('name')}: {e.message} at {e.path}")


def test_a_bad_object_fails_validation() -> None:
    """The schema check can fail: an unknown field and a wrong type are caught."""
    job = build("plain", two_role_app())[1]
    job["spec"]["template"]["spec"]["restartPolicyy"] = "Never"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)


def _containers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p["spec"]["containers"][0] for obj in objects for p in _pods_of(obj)]


def _pods_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Job" and obj["apiVersion"] == "batch/v1":
        return [obj["spec"]["template"]]
    return [o for o in _as_pods(obj) if o["kind"] == "Pod"]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_plain_shape_a_job_per_replica_under_a_headless_service() -> None:
    objects = build("plain", two_role_app())
    service, *jobs = objects
    assert service["kind"] == "Service" and service["metadata"]["name"] == APP_ID
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"txd.dev/app-id": APP_ID}
    roles = json.loads(service["metadata"]["annotations"]["txd.dev/roles"])
    assert roles == [["trainer-main", 2], ["data_reader", 1]]
    assert [j["metadata"]["name"] for j in jobs] == [
        f"{APP_ID}-trainer-main-0",
        f"{APP_ID}-trainer-main-1",
        f"{APP_ID}-datareader-0",
    ]
    assert [j["spec"]["backoffLimit"] for j in jobs] == [2, 2, 1]
    for j, k in zip(jobs, [0, 1, 0], strict=True):
        assert j["spec"]["completions"] == j["spec"]["parallelism"] == 1
        pod = j["spec"]["template"]
        assert pod["metadata"]["labels"]["txd.dev/replica-id"] == str(k)
        assert pod["spec"]["subdomain"] == APP_ID
        assert pod["spec"]["restartPolicy"] == "Never"
    assert jobs[2]["spec"]["template"]["metadata"]["labels"]["txd.dev/role"] == "data_reader"
    assert jobs[2]["spec"]["template"]["spec"]["hostname"] == "datareader-0"
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "torchx.pytorch.org"  # TorchX's
        assert labels["txd.dev/scheduler"] == "kubernetes"
        assert labels["txd.dev/app-id"] == APP_ID


def test_rank0_host_per_shape() -> None:
    """Rank 0 itself gets localhost (as TorchX); the others its name under the Service, and on
    Volcano the env var Volcano's svc plugin really sets: VC_<TASK>_HOSTS with '-' as '_'
    (TorchX's VC_TRAINER-MAIN_0_HOSTS is never set)."""
    plain = _containers(build("plain", two_role_app()))
    assert [_env(c)["TORCHX_RANK0_HOST"] for c in plain] == [
        "localhost",
        f"trainer-main-0.{APP_ID}",
        f"trainer-main-0.{APP_ID}",
    ]
    assert plain[1]["command"][-1] == "TORCHX_RANK0_HOST"  # ${rank0_env}
    volcano = _containers(build("volcano", two_role_app()))
    assert _env(volcano[0])["TORCHX_RANK0_HOST"] == "localhost"
    assert volcano[0]["command"][-1] == "TORCHX_RANK0_HOST"
    assert "TORCHX_RANK0_HOST" not in _env(volcano[1])
    assert volcano[1]["command"][-1] == "VC_TRAINER_MAIN_0_HOSTS"
    torchx_guess = f"VC_{normalize_str('trainer-main')}_0_HOSTS".upper()
    assert torchx_guess == "VC_TRAINER-MAIN_0_HOSTS" != volcano[1]["command"][-1]
    indexed = _containers(build("indexed", two_role_app()))
    assert {_env(c)["TORCHX_RANK0_HOST"] for c in indexed} == {f"{APP_ID}-trainer-main-0.{APP_ID}"}


def test_volcano_job_as_torchx_makes_it() -> None:
    (job,) = build("volcano", two_role_app())
    spec = job["spec"]
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["kind"] == "Job"
    assert spec["schedulerName"] == "volcano" and spec["queue"] == "default"
    assert spec["plugins"] == {"svc": ["--publish-not-ready-addresses"], "env": []}
    assert spec["maxRetry"] == 1  # the smallest max_retries
    assert spec["minAvailable"] == 3
    assert spec["priorityClassName"] == "high"
    # One task per replica, named as TorchX names them (normalize_str of "<role>-<k>").
    names = [t["name"] for t in spec["tasks"]]
    expected = [
        normalize_str(f"{r}-{k}")
        for r, k in [("trainer-main", 0), ("trainer-main", 1), ("data_reader", 0)]
    ]
    assert names == expected == ["trainer-main-0", "trainer-main-1", "datareader-0"]
    assert all(t["replicas"] == 1 for t in spec["tasks"])
    assert spec["tasks"][0]["policies"] == [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "RestartJob"},
    ]
    assert spec["tasks"][2]["policies"][0]["action"] == "RestartTask"  # RetryPolicy.ROLE
    assert "hostname" not in spec["tasks"][0]["template"]["spec"]  # Volcano's svc plugin sets it


def test_volcano_min_replicas_and_no_retries() -> None:
    app = two_role_app()
    app.roles[0].num_replicas = 3
    app.roles[0].min_replicas = 2
    app.roles[0].max_retries = 0
    (job,) = build("volcano", app)
    tasks = job["spec"]["tasks"]
    assert [t.get("minAvailable") for t in tasks] == [1, 1, 0, None]
    assert job["spec"]["minAvailable"] == 3
    assert "maxRetry" not in tasks[0] and "policies" not in tasks[0]
    assert job["spec"]["maxRetry"] == 0


def test_resources_shm_and_mounts_as_torchx() -> None:
    trainer, _, reader = _containers(build("plain", two_role_app()))
    assert trainer["resources"] == {
        "limits": {
            "cpu": "2000m",
            "memory": "3000M",
            "nvidia.com/gpu": "1",
            "vpc.amazonaws.com/efa": "1",
        },
        "requests": {"cpu": "1900m", "memory": "1976M", "nvidia.com/gpu": "1"},
    }
    assert reader["resources"]["requests"] == {"cpu": "900m", "memory": "0M"}  # floored at 0
    assert trainer["volumeMounts"][0] == {"name": "dshm", "mountPath": "/dev/shm"}
    assert trainer["securityContext"] == {"privileged": True}  # a device mount
    assert "securityContext" not in reader
    pod = build("plain", two_role_app())[1]["spec"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    assert pod["volumes"][1:] == [
        {"name": "mount-0", "hostPath": {"path": "/data"}},
        {"name": "mount-1", "persistentVolumeClaim": {"claimName": "checkpoints"}},
        {"name": "mount-2", "hostPath": {"path": "/dev/fuse"}},
    ]
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "p3.2xlarge"
    assert _env(trainer)["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_ports_declared_only_off_the_host_network() -> None:
    off = _containers(build("plain", two_role_app(), host_network=False))
    assert off[0]["ports"] == [{"name": "c10d", "containerPort": 29500}]
    on = build("plain", two_role_app())[1]["spec"]["template"]["spec"]
    assert on["hostNetwork"] is True and on["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "ports" not in on["containers"][0]


def test_indexed_replica_id_from_the_completion_index() -> None:
    _, trainer, reader = build("indexed", two_role_app())
    assert trainer["metadata"]["name"] == f"{APP_ID}-trainer-main"
    assert trainer["spec"]["completionMode"] == "Indexed"
    assert trainer["spec"]["completions"] == trainer["spec"]["parallelism"] == 2
    assert trainer["spec"]["backoffLimit"] == 4  # max_retries per replica
    c = reader["spec"]["template"]["spec"]["containers"][0]
    assert c["env"][0]["name"] == "JOB_COMPLETION_INDEX"
    assert c["command"][-1] == "echo reader $(JOB_COMPLETION_INDEX) of " + APP_ID
    assert _env(c)["SHARD"] == "$(JOB_COMPLETION_INDEX)"


def test_owned_points_every_other_object_at_the_root() -> None:
    objects = build("plain", two_role_app())
    out = ko.owned(objects, objects[0], "uid-1")
    assert [o["metadata"]["name"] for o in out] == [o["metadata"]["name"] for o in objects[1:]]
    for o in out:
        assert o["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "name": APP_ID,
                "uid": "uid-1",
                "blockOwnerDeletion": True,
            }
        ]
    assert all("ownerReferences" not in o["metadata"] for o in objects)  # copies


def test_appwrapper_pods_named_by_role_and_replica() -> None:
    (aw,) = build("appwrapper-v1beta2", two_role_app())
    assert aw["apiVersion"] == "workload.codeflare.dev/v1beta2"
    assert aw["metadata"]["annotations"]["workload.codeflare.dev.appwrapper/retryLimit"] == "1"
    kinds = [
        (c["template"]["kind"], c["template"]["metadata"]["name"], c["podSets"])
        for c in aw["spec"]["components"]
    ]
    pod_set = [{"replicas": 1, "path": "template"}]
    assert kinds == [
        ("PodGroup", f"{APP_ID}-pg0", []),
        ("PodGroup", f"{APP_ID}-pg1", []),
        ("Pod", f"{APP_ID}-trainer-main-0", pod_set),
        ("Pod", f"{APP_ID}-trainer-main-1", pod_set),
        ("Pod", f"{APP_ID}-datareader-0", pod_set),
        ("Service", APP_ID, []),
    ]
    for shape, api in [
        ("appwrapper-codeflare-v1beta1", "workload.codeflare.dev/v1beta1"),
        ("appwrapper-mcad-v1beta1", "mcad.ibm.com/v1beta1"),
    ]:
        (old,) = build(shape, two_role_app())
        assert old["apiVersion"] == api
        assert old["spec"]["priority"] == 5
        assert old["spec"]["schedulingSpec"]["minAvailable"] == 3
        assert old["spec"]["schedulingSpec"]["requeuing"]["maxNumRequeuings"] == 1
        generic = old["spec"]["resources"]["GenericItems"]
        assert [g["generictemplate"] for g in generic] == [
            c["template"] for c in aw["spec"]["components"]
        ]  # the same objects whatever the API


def test_appwrapper_api_by_option() -> None:
    """The short name v1beta2 is workload.codeflare.dev's; no option: TorchX's API."""
    assert build("appwrapper-v1beta2", two_role_app(), appwrapper_version="v1beta2") == build(
        "appwrapper-v1beta2", two_role_app()
    )
    (aw,) = crds.appwrapper_objects(
        two_role_app(), APP_ID, McadOpts(), scheduler="kubernetes_mcad", session="txd"
    )
    assert aw["apiVersion"] == crds.DEFAULT_APPWRAPPER_API == "workload.codeflare.dev/v1beta1"
    with pytest.raises(InvalidArgument, match=r"ambiguous: workload\.codeflare\.dev/v1beta1 .*or "):
        build("appwrapper-v1beta2", two_role_app(), appwrapper_version="v1beta1")


def test_mcad_pods_find_rank0_as_torchx_does() -> None:
    """TORCHX_MCAD_<ROLE>_0_HOSTS on every pod for its role (TorchX's name), and role 0's,
    which ${rank0_env} names; rank 0 itself has TORCHX_RANK0_HOST=localhost."""
    (aw,) = build("appwrapper-codeflare-v1beta1", two_role_app())
    pods = [
        g["generictemplate"]
        for g in aw["spec"]["resources"]["GenericItems"]
        if g["generictemplate"]["kind"] == "Pod"
    ]
    envs = [{e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]} for p in pods]
    rank0 = f"trainer-main-0.{APP_ID}"
    assert envs[0]["TORCHX_RANK0_HOST"] == "localhost"
    assert envs[0]["TORCHX_MCAD_TRAINERMAIN_0_HOSTS"] == rank0
    assert "TORCHX_RANK0_HOST" not in envs[1]
    assert envs[1]["TORCHX_MCAD_TRAINERMAIN_0_HOSTS"] == rank0
    assert envs[2]["TORCHX_MCAD_DATAREADER_0_HOSTS"] == f"datareader-0.{APP_ID}"
    assert envs[2]["TORCHX_MCAD_TRAINERMAIN_0_HOSTS"] == rank0
    args = [p["spec"]["containers"][0]["command"] for p in pods[:2]]
    assert [a[a.index("--master") + 1] for a in args] == [
        "TORCHX_RANK0_HOST",
        "TORCHX_MCAD_TRAINERMAIN_0_HOSTS",
    ]
    assert ko.mcad_hosts_env("2nd-Stage_x") == "TORCHX_MCAD_NDSTAGEX_0_HOSTS"


def test_app_id_fits_every_name() -> None:
    long_role = Role(name="r" * 40, image="i", entrypoint="e", num_replicas=10)
    app_id = names.app_id_for("My_Very.Long-Application-Name-" + "x" * 60, [long_role])
    assert re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", app_id), app_id
    assert len(f"{app_id}-{'r' * 40}-9") == 63  # the name part is cut to fit, no shorter
    assert app_id.startswith("myveryl-")
    roomy = names.app_id_for("My_Very.Long-Application-Name-" + "x" * 60, [Role(name="w")])
    assert len(roomy) == 42 and roomy.startswith("myverylong-application-name-")
    short = names.app_id_for("7up", [])
    assert re.fullmatch(r"up-[a-z0-9]{12}", short), short
    assert re.fullmatch(r"[b-z][a-z0-9]{11}", names.app_id_for("___", []))


def _role0(**fields: Any) -> Callable[[AppDef], None]:
    """Sets fields of role 0 (repeated and map fields replaced)."""

    def change(app: AppDef) -> None:
        role = app.roles[0]
        for key, value in fields.items():
            if key == "resource":
                role.resource.CopyFrom(value)
            elif key == "mounts":
                del role.mounts[:]
                role.mounts.extend(value)
            elif key == "port_map":
                role.port_map.clear()
                role.port_map.update(value)
            else:
                setattr(role, key, value)

    return change


def _same(app: AppDef) -> None:
    pass


def _no_roles(app: AppDef) -> None:
    del app.roles[:]


BAD_INPUTS: list[tuple[str, str, Callable[[AppDef], None], dict[str, Any]]] = [
    ("plain", "app.roles[0].name", _role0(name="___"), {}),
    ("plain", "app.roles[0].name", _role0(name="a" * 60), {}),
    ("plain", "app.roles[1].name", _role0(name="datareader"), {}),  # role 1's Kubernetes name
    ("plain", "app.roles[0].image", _role0(image=""), {}),
    ("plain", "app.roles[0].resource.cpu", _role0(resource=Resource(cpu=-1)), {}),
    ("plain", "app.roles[0].resource.mem_mb", _role0(resource=Resource(mem_mb=-5)), {}),
    (
        "plain",
        "app.roles[0].resource.devices['efa']",
        _role0(resource=Resource(devices={"efa": 1})),
        {},
    ),
    (
        "plain",
        "app.roles[0].resource.devices['x.io/d']",
        _role0(resource=Resource(devices={"x.io/d": 0})),
        {},
    ),
    ("plain", "app.roles[0].mounts[0]", _role0(mounts=[Mount()]), {}),
    (
        "plain",
        "app.roles[0].mounts[0].bind.src_path",
        _role0(mounts=[Mount(bind=BindMount(src_path="data", dst_path="/d"))]),
        {},
    ),
    (
        "plain",
        "app.roles[0].mounts[0].volume.src",
        _role0(mounts=[Mount(volume=VolumeMount(dst_path="/d"))]),
        {},
    ),
    ("plain", "app.roles[0].port_map['C10D_port']", _role0(port_map={"C10D_port": 1}), {}),
    ("plain", "app.roles[0].port_map['c10d']", _role0(port_map={"c10d": 70000}), {}),
    ("plain", "app.roles[0].max_retries", _role0(max_retries=-1), {}),
    ("plain", "cfg.image_pull_policy", _same, {"image_pull_policy": "Sometimes"}),
    ("plain", "cfg.tolerations", _same, {"tolerations": ["gpu=1:Maybe"]}),
    ("plain", "cfg.node_selector", _same, {"node_selector": {"disk": "fast ssd"}}),
    ("volcano", "cfg.queue", _same, {"queue": ""}),
    ("appwrapper-v1beta2", "cfg.appwrapper_version", _same, {"appwrapper_version": "v2"}),
    ("appwrapper-v1beta2", "cfg.appwrapper_version", _same, {"appwrapper_version": "v1beta1"}),
    ("appwrapper-v1beta2", "cfg.priority", _same, {"priority": 3}),
    ("indexed", "app.roles", _no_roles, {}),
]


@pytest.mark.parametrize(("shape", "field", "change", "kw"), BAD_INPUTS)
def test_bad_input_names_the_field(
    shape: str, field: str, change: Callable[[AppDef], None], kw: dict[str, Any]
) -> None:
    app = two_role_app()
    change(app)
    with pytest.raises(InvalidArgument) as e:
        build(shape, app, **kw)
    assert e.value.field == field, str(e.value)
    assert e.value.reason and "\n" not in str(e.value)


def test_a_role_name_too_long_for_any_app_id() -> None:
    with pytest.raises(InvalidArgument, match=r"app.roles\[1\].name: too long"):
        names.app_id_for("x", [Role(name="a"), Role(name="b" * 50)])


def test_render_yaml_header_and_order() -> None:
    objects = build("plain", two_role_app())
    text = ko.render_yaml(objects, header="ownerReferences to the root are added at submit")
    assert text.startswith("# ownerReferences to the root are added at submit\napiVersion: v1\n")
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(text)] == [
        o["metadata"]["name"] for o in objects
    ]


def _update_golden() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for shape in SHAPES:
        (GOLDEN / f"{shape}.yaml").write_text(_golden_text(shape))
        print(f"wrote {GOLDEN / shape}.yaml")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update-golden"]:
        sys.exit(f"usage: {sys.argv[0]} --update-golden")
    _update_golden()


def _group(name: str, *versions: str) -> dict[str, Any]:
    """One entry of GET /apis' groups, as the apiserver lists it (preferred first)."""
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


@pytest.mark.parametrize(
    ("groups", "api"),
    [
        ([_group("workload.codeflare.dev", "v1beta1")], "workload.codeflare.dev/v1beta1"),
        ([_group("workload.codeflare.dev", "v1beta2")], "workload.codeflare.dev/v1beta2"),
        ([_group("mcad.ibm.com", "v1beta1")], "mcad.ibm.com/v1beta1"),
        # Old MCAD's group left beside the new one: the new one's.
        (
            [_group("mcad.ibm.com", "v1beta1"), _group("workload.codeflare.dev", "v1beta1")],
            "workload.codeflare.dev/v1beta1",
        ),
        # One CRD serving both versions: the preferred.
        (
            [_group("workload.codeflare.dev", "v1beta2", "v1beta1")],
            "workload.codeflare.dev/v1beta2",
        ),
        ([_group("workload.codeflare.dev", "v1alpha9"), _group("batch", "v1")], ""),
        ([], ""),
    ],
)
def test_served_appwrapper_api(groups: list[dict[str, Any]], api: str) -> None:
    assert crds.served_appwrapper_api(groups) == api


def test_expand_vars_lists_a_referenced_variable_first() -> None:
    """Kubernetes expands `$(NAME)` in an env value only to a variable listed before it: with
    expand_vars, each variable follows those it references (else by name)."""
    app = two_role_app()
    app.roles[1].env.clear()
    app.roles[1].env.update({"A": "$(C)-$(B)", "B": "$(C)", "C": "c", "D": "$(D)"})
    (*_, reader) = build("plain", app, expand_vars=True)
    names_ = [e["name"] for e in reader["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names_[:4] == ["C", "B", "A", "D"]
    (*_, reader) = build("plain", app)
    env = reader["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env][:4] == ["A", "B", "C", "D"]
    assert env[0]["value"] == "$$(C)-$$(B)"
