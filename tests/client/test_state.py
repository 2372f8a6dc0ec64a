"""txd.client.AppState: the state enum with names, equal to txd.v1's ints and TorchX's."""

from __future__ import annotations

import pytest
from txd import v1
from txd.client import AppState


def test_names_and_numbers_are_txd_v1s() -> None:
    assert [(s.name, s.value) for s in AppState] == sorted(
        v1.AppState.items(), key=lambda item: item[1]
    )


def test_prints_its_name() -> None:
    assert str(AppState.SUCCEEDED) == "SUCCEEDED"
    assert f"{AppState(3)}|{AppState.FAILED:>8}" == "RUNNING|  FAILED"
    assert AppState(v1.AppStatus(state=v1.AppState.CANCELLED).state) == AppState.CANCELLED


def test_terminal_states() -> None:
    assert [s for s in AppState if s.is_terminal()] == sorted(v1.TERMINAL_STATES)


def test_equal_to_torchx_app_state() -> None:
    specs = pytest.importorskip("torchx.specs")
    assert [(s.name, int(s)) for s in specs.AppState] == [(s.name, int(s)) for s in AppState]
    assert AppState.SUCCEEDED == specs.AppState.SUCCEEDED
