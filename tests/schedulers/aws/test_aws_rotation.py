"""rotation.Rotation: the per-round describe budget of schedulers that ask one job at a time."""

from __future__ import annotations

import math

import pytest
from txd.schedulers.aws.rotation import Rotation


def test_every_job_is_reached_within_ceil_jobs_over_budget_rounds() -> None:
    ids = [f"job{i}" for i in range(40)]
    rot = Rotation(10)
    seen: list[str] = []
    for _ in range(math.ceil(len(ids) / 10)):
        picked = rot.pick(ids)
        assert len(picked) == 10
        seen += picked
    assert sorted(seen) == sorted(ids)  # each once in 4 rounds
    assert rot.pick(ids) == ids[:10]  # then round again, oldest first


def test_a_new_job_goes_first_and_ended_ones_are_forgotten() -> None:
    rot = Rotation(2)
    assert rot.pick(["a", "b", "c"]) == ["a", "b"]
    assert rot.pick(["a", "b", "c", "new"]) == ["c", "new"]
    assert rot.pick(["b", "c", "new"]) == ["b", "c"]  # a ended; b was asked before c
    assert rot.pick(["a"]) == ["a"]  # a is new again: nothing of it was kept


def test_fewer_jobs_than_budget_are_all_asked() -> None:
    assert Rotation(10).pick(["x", "y"]) == ["x", "y"]
    assert Rotation(10).pick([]) == []
    with pytest.raises(ValueError, match="at least 1"):
        Rotation(0)
