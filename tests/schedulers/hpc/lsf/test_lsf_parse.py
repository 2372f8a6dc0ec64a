"""The lsf scheduler's readers of LSF output, on recorded output (recorded/)."""

from __future__ import annotations

import re

import lsf_fakes
import pytest
from txd.schedulers.hpc.lsf_script import clean_name, pick_rank0_host
from txd.schedulers.hpc.lsf_status import BjobsRow, parse_bjobs, replica_state
from txd.v1 import AppState


def test_parse_bjobs_reads_every_field_of_every_row() -> None:
    rows = parse_bjobs(lsf_fakes.recorded("bjobs_apps.stdout").decode())
    assert len(rows) == 13
    assert rows[0] == BjobsRow("3999", "default", "DONE", "-", "cpu-node-01", "sleep 600")
    # job_name comes last: a '|' in it does not shift the other fields
    assert rows[1].name == '/bin/sh -c "echo a|b"'
    assert rows[1].stat == "RUN"
    by_id = {r.job_id: r for r in rows}
    assert by_id["4101"].exec_host == "8*gpu-node-01"
    assert by_id["4120"].exit_code == "1"
    assert by_id["4130"] == BjobsRow(
        "4130", "stop-fghjklmnpqrs", "EXIT", "130", "gpu-node-02", "stop-fghjklmnpqrs-worker-0"
    )


def test_parse_bjobs_skips_blank_lines_and_no_job_notes() -> None:
    text = "No job found\n\n4102|p|RUN|-|h|p-a-0\n"
    assert [r.job_id for r in parse_bjobs(text)] == ["4102"]


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("4101|p|RUN|-|h", "line 2 is not 6 fields: '4101|p|RUN|-|h'"),  # cut short
        ("x|p|RUN|-|h|p-a-0", "line 2 has fields out of place"),
        ("4101|RUN|-|h|p-a-0|p", "line 2 has fields out of place"),  # a column missing
        ("\x00\ufffd\x7f|||||", "line 2 has fields out of place"),
    ],
)
def test_parse_bjobs_refuses_what_is_not_a_row(line: str, says: str) -> None:
    """A row skipped would make its app look forgotten by LSF (UNKNOWN)."""
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_bjobs(f"4102|p|RUN|-|h|p-a-0\n{line}\n")


@pytest.mark.parametrize(
    ("stat", "exit_code", "expected"),
    [
        ("DONE", "-", AppState.SUCCEEDED),
        ("EXIT", "1", AppState.FAILED),
        ("EXIT", "130", AppState.CANCELLED),  # SIGINT, what bkill sends first
        ("EXIT", "-", AppState.FAILED),
        ("PEND", "-", AppState.PENDING),
        ("PSUSP", "-", AppState.PENDING),
        ("USUSP", "-", AppState.PENDING),
        ("SSUSP", "-", AppState.PENDING),
        ("RUN", "-", AppState.RUNNING),
        ("UNKWN", "-", AppState.UNKNOWN),
        ("WAIT", "-", AppState.UNKNOWN),
        ("ZOMBI", "-", AppState.UNKNOWN),
    ],
)
def test_replica_state_maps_lsf_states_as_torchx(stat: str, exit_code: str, expected: int) -> None:
    assert replica_state(stat, exit_code) == expected


def test_replica_state_of_a_cancelled_app_is_cancelled_whatever_the_exit_code() -> None:
    assert replica_state("EXIT", "1", cancelled=True) == AppState.CANCELLED
    assert replica_state("DONE", "-", cancelled=True) == AppState.SUCCEEDED
    assert replica_state("RUN", "-", cancelled=True) == AppState.RUNNING


def test_pick_rank0_host_takes_the_first_host_that_fits() -> None:
    out = lsf_fakes.recorded("bhosts.txt").decode()
    assert pick_rank0_host(out, cpu=1, gpu=0) == "cpu-node-01"  # lsf-master has 0 slots
    assert pick_rank0_host(out, cpu=33, gpu=0) == "cpu-node-02"  # "-": no slot limit
    assert pick_rank0_host(out, cpu=1, gpu=1) == "gpu-node-01"  # "-" GPUs: none
    assert pick_rank0_host(out, cpu=64, gpu=8) == "gpu-node-01"
    assert pick_rank0_host(out, cpu=1, gpu=9) is None
    assert pick_rank0_host("garbage\nh x y\n\n", cpu=1, gpu=0) is None


@pytest.mark.parametrize(
    ("name", "cleaned"),
    [("trainer-0", "trainer-0"), ("My.App_1-2", "myapp_1-2"), ("-x-0", "x-0"), ("Ünï-0", "n-0")],
)
def test_clean_name_keeps_what_lsf_and_docker_accept(name: str, cleaned: str) -> None:
    assert clean_name(name) == cleaned
