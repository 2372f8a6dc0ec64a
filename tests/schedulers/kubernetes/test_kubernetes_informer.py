"""The pure parts of the informer and the API connection: the relist's diff, the watch's line
splitting and the names requests are counted under (the real cluster's test is
test_kubernetes_informer_live.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from txd.schedulers.kubernetes.client import KubeError, call_kind
from txd.schedulers.kubernetes.informer import Event, _lines, diff


def obj(name: str, version: str, uid: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version, "uid": uid or f"u-{name}"}}


def test_diff_yields_each_difference_once() -> None:
    old = {"gone": obj("gone", "1"), "same": obj("same", "2"), "changed": obj("changed", "3")}
    new = {"same": obj("same", "2"), "changed": obj("changed", "9"), "new": obj("new", "10")}
    events = diff(old, new)
    assert [(e.type, e.name, e.obj["metadata"]["resourceVersion"]) for e in events] == [
        ("DELETED", "gone", "1"),  # its last state known
        ("MODIFIED", "changed", "9"),
        ("ADDED", "new", "10"),
    ]


def test_diff_of_an_object_replaced_under_the_same_name() -> None:
    old = {"x": obj("x", "1", uid="first")}
    new = {"x": obj("x", "5", uid="second")}
    assert [(e.type, e.obj["metadata"]["uid"]) for e in diff(old, new)] == [
        ("DELETED", "first"),
        ("ADDED", "second"),
    ]


def test_diff_of_equal_stores_is_empty() -> None:
    store = {"a": obj("a", "1")}
    assert diff(store, dict(store)) == []
    assert diff({}, {}) == []
    assert diff({}, store) == [Event("ADDED", store["a"])]


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_lines_joins_chunks_split_anywhere() -> None:
    got = [line async for line in _lines(_chunks(b'{"a":', b'1}\n{"b"', b":2}\n\n{", b"}"))]
    assert got == [b'{"a":1}', b'{"b":2}', b"{}"]


@pytest.mark.parametrize(
    ("method", "path", "query", "kind"),
    [
        ("GET", "/api/v1/namespaces/ns/pods", None, "list pods"),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, "watch pods"),
        ("GET", "/api/v1/namespaces/ns/pods/p", None, "get pods"),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", {"follow": True}, "get log"),
        ("POST", "/apis/batch/v1/namespaces/ns/jobs", None, "create jobs"),
        ("PATCH", "/apis/batch.volcano.sh/v1alpha1/namespaces/ns/jobs/j/status", None,
         "patch jobs/status"),
        ("PUT", "/api/v1/namespaces/ns/services/s", None, "replace services"),
        ("DELETE", "/apis/batch/v1/namespaces/ns/jobs/j", None, "delete jobs"),
        ("DELETE", "/api/v1/namespaces/ns/pods", None, "deletecollection pods"),
        ("GET", "/api/v1/namespaces", None, "list namespaces"),
        ("GET", "/api/v1/namespaces/ns", None, "get namespaces"),
        ("GET", "/api/v1/nodes", None, "list nodes"),
        ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x", None,
         "get customresourcedefinitions"),
    ],
)  # fmt: skip
def test_call_kind(method: str, path: str, query: dict[str, Any] | None, kind: str) -> None:
    assert call_kind(method, path, query) == kind


def test_kube_error_is_one_line() -> None:
    e = KubeError(410, "Expired", "too old resource version:\n 1 (2)", what="watch pods")
    assert str(e) == "watch pods: too old resource version: 1 (2) (410 Expired)"
    assert str(KubeError(0, "Unreachable", "cannot reach x")) == "cannot reach x"
