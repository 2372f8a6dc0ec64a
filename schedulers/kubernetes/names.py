"""The names, labels and annotations of txd's Kubernetes objects: TorchX's DNS forms of app
and role names, new app ids that leave room for every replica's object names, the labels every
object carries and the root's shape annotation. Pure functions; the builders
(txd.schedulers.kubernetes.objects, crds) and the status parsing (kubernetes.status) share them.

Labels, two sets side by side. txd's own (`txd.dev/scheduler`, `session`, `app-id`; per replica
`role`, `replica-id`) are the ones txd reads. TorchX 0.7's are written for TorchX's users (their
selectors, quota and cost rules): on every object `app.kubernetes.io/managed-by:
torchx.pytorch.org`, `app.kubernetes.io/name` (the app's name) and `app.kubernetes.io/instance`
(the app id); on pods and the Jobs that make them also `torchx.pytorch.org/version`,
`app-name`, `role-index`, `role-name` and `replica-id` (not on an Indexed Job's pods: they share
one template). A value that is not a valid label value (TorchX writes it as is, and the
apiserver refuses the job) is made one: bad characters as '-', at most 63 (`label_value`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from txd.schedulers import torchx_labels as tx
from txd.schedulers.api import make_unique, num_replicas
from txd.schedulers.errors import InvalidArgument
from txd.v1.app_pb2 import AppDef, Role

MAX_APP_ID = 42
MAX_NAME = 63  # a DNS-1123 label: pod, job and host names
ID_SUFFIX = 12  # make_unique's random part

# TorchX's: the same key and value as TorchX's jobs (txd's own are told apart by SCHEDULER_LABEL).
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_TORCHX = "torchx.pytorch.org"
KUBE_APP_NAME = "app.kubernetes.io/name"
KUBE_INSTANCE = "app.kubernetes.io/instance"
SCHEDULER_LABEL = "txd.dev/scheduler"
SESSION_LABEL = "txd.dev/session"
APP_ID_LABEL = "txd.dev/app-id"
ROLE_LABEL = "txd.dev/role"
REPLICA_LABEL = "txd.dev/replica-id"
ROLES_ANNOTATION = "txd.dev/roles"

_DNS_DROP = re.compile(r"[^a-z0-9-]")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_LABEL_BAD = re.compile(r"[^-A-Za-z0-9_.]")


def dns_name(text: str) -> str:
    """TorchX's normal form of a name in Kubernetes: lowercase, only [a-z0-9-], no leading '-'
    (so `trainer_foo` is `trainerfoo`, as in TorchX's Volcano task names)."""
    return _DNS_DROP.sub("", text.lower()).lstrip("-")


def role_dns(app: AppDef, i: int) -> str:
    """Role i's name in object and host names; InvalidArgument when it has none, or shares it
    with an earlier role."""
    name = dns_name(app.roles[i].name)
    if not name:
        raise InvalidArgument(
            f"app.roles[{i}].name",
            f"{app.roles[i].name!r} has no letter or digit to name Kubernetes objects with",
        )
    for j in range(i):
        if dns_name(app.roles[j].name) == name:
            raise InvalidArgument(
                f"app.roles[{i}].name",
                f"{app.roles[i].name!r} and roles[{j}] {app.roles[j].name!r} have the same "
                f"Kubernetes name {name!r}",
            )
    return name


def label_value(text: str) -> str:
    """text if it is a valid label value, else a valid one made from it (bad characters as
    '-', at most 63, starting and ending with a letter or digit)."""
    if _LABEL_VALUE.fullmatch(text):
        return text
    return _LABEL_BAD.sub("-", text)[:63].strip("-_.")


def check_label(field: str, key: str, value: str) -> None:
    if not _LABEL_VALUE.fullmatch(value):
        raise InvalidArgument(field, f"{value!r} (of {key!r}) is not a valid label value")


def app_id_for(name: str, roles: Sequence[Role] = ()) -> str:
    """A new app id: `<name part>-<random>`, a DNS-1123 label starting with a letter, at most
    42 characters, with the name part cut so that `<app_id>-<role>-<k>` fits 63 for each of
    the roles; InvalidArgument naming the role whose name cannot fit."""
    budget = MAX_APP_ID
    for i, role in enumerate(roles):
        longest = len(f"-{dns_name(role.name)}-{num_replicas(role) - 1}")
        if MAX_NAME - longest < ID_SUFFIX:
            raise InvalidArgument(
                f"app.roles[{i}].name",
                f"too long for Kubernetes names: at most {MAX_NAME - ID_SUFFIX - 3} characters "
                f"of [a-z0-9-] ({role.name!r})",
            )
        budget = min(budget, MAX_NAME - longest)
    part = dns_name(name).lstrip("-0123456789")[: budget - ID_SUFFIX - 1].rstrip("-")
    return make_unique(part, ID_SUFFIX)


def app_labels(app: AppDef, scheduler: str, session: str, app_id: str) -> dict[str, str]:
    """Every object's: TorchX's object labels, then txd's."""
    return {
        KUBE_APP_NAME: label_value(app.name),
        MANAGED_BY: MANAGED_BY_TORCHX,
        KUBE_INSTANCE: app_id,
        SCHEDULER_LABEL: scheduler,
        SESSION_LABEL: label_value(session),
        APP_ID_LABEL: app_id,
    }


def replica_labels(base: Mapping[str, str], app: AppDef, i: int, k: int | None) -> dict[str, str]:
    """Replica k of role i's (k None: every replica of an Indexed Job): base (app_labels), then
    TorchX's pod labels and txd's role and replica id."""
    role = app.roles[i]
    torchx = {
        tx.VERSION: tx.TORCHX_VERSION,
        tx.APP_NAME: label_value(app.name),
        tx.ROLE_INDEX: str(i),
        tx.ROLE_NAME: label_value(role.name),
    }
    own = {ROLE_LABEL: role.name if _LABEL_VALUE.fullmatch(role.name) else dns_name(role.name)}
    if k is not None:
        torchx[tx.REPLICA_ID] = own[REPLICA_LABEL] = str(k)
    return {**base, **torchx, **own}


def roles_json(app: AppDef) -> str:
    """The app's shape, `[["role", replicas], ...]`: on the root, and on every Job (the status
    of plain and indexed Jobs is read from the Jobs, not their Service)."""
    return json.dumps([[r.name, num_replicas(r)] for r in app.roles])


def root_meta(app: AppDef, name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "labels": dict(labels),
        "annotations": {ROLES_ANNOTATION: roles_json(app)},
    }
