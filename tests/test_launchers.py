"""``pptrace run`` under a multi-node launcher (issue 22): the run id every node shares, and the
note that says how to bring the nodes' traces together."""

from __future__ import annotations

import argparse

import pytest

from pptrace.cli import launchers
from pptrace.cli.run import build_env


@pytest.mark.parametrize(("command", "count"), [
    (["torchrun", "--nnodes", "2", "--nproc-per-node", "2", "train.py"], 2),
    (["/usr/bin/torchrun", "--nnodes=1:4", "train.py"], 4),
    (["python", "-m", "torch.distributed.run", "--nnodes", "3", "x.py"], 3),
    (["torchrun", "--standalone", "--nproc_per_node", "4", "x.py"], 1),
    (["torchrun", "x.py", "--nnodes", "9"], 1),  # the script's own argument
    (["python", "x.py", "--nnodes", "2"], 1),
])
def test_the_node_count_is_read_from_torchrun(command: list[str], count: int) -> None:
    assert launchers.nodes(command) == count


def test_the_run_id_comes_from_what_the_nodes_share() -> None:
    cmd = ["torchrun", "--nnodes", "2", "--rdzv_id", "job7", "--rdzv-backend", "c10d", "x.py"]
    assert launchers.shared_run_id(cmd, {}) == "tr-job7"
    assert launchers.shared_run_id(cmd, {"TORCHELASTIC_RUN_ID": "el"}) == "tr-el"
    assert launchers.shared_run_id(["torchrun", "--rdzv-id", "none", "x.py"], {}) is None
    assert launchers.shared_run_id(["python", "x.py"], {}) is None


def test_build_env_takes_the_shared_run_id_and_a_user_id_wins() -> None:
    cmd = ["--", "torchrun", "--nnodes", "2", "--rdzv-id", "j", "x.py"]
    args = argparse.Namespace(command=cmd)
    assert build_env(args, {})["PPTRACE_RUN_ID"] == "tr-j"
    assert build_env(args, {"PPTRACE_RUN_ID": "mine"})["PPTRACE_RUN_ID"] == "mine"
    drawn = {build_env(argparse.Namespace(command=["python", "x.py"]), {})["PPTRACE_RUN_ID"]
             for _ in range(2)}
    assert len(drawn) == 2  # one node, nothing shared: drawn afresh


def test_a_multi_node_job_is_told_how_to_combine_the_traces() -> None:
    note = launchers.combine_note(["torchrun", "--nnodes", "2", "x.py"], "t", "r1")
    assert note is not None and "2-node job" in note and "pptrace analyze NODE1_DIR" in note
    assert launchers.combine_note(["torchrun", "--standalone", "x.py"], "t", "r1") is None
