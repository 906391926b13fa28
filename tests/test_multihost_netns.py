"""A real two-host job (issue 22): two network namespaces joined by a veth pair, gloo over it,
each host in its own UTS and PID namespace with the *same* hostname (as containers often report),
``pptrace run -- torchrun --nnodes 2`` on each with its own trace folder and its own drawn run id.
Analysed together, the two folders are one job of two processes, and the healthy run is clean,
also with node 1's clock skewed behind or ahead: its recorded wall-clock times shifted as that
host would have written them, and for real, node 1's processes under ``faketime`` (libfaketime,
the monotonic clock left real: gloo's and the rendezvous' timeouts run on it).
Where namespaces cannot be made here, the test says why and skips."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analysis, analyze
from pptrace.load.loader import load_paths
from pptrace.model.findings import Severity
from pptrace.model.trace import Trace
from pptrace.report.text import render_text
from tests.helpers_clocks import MS, skewed
from tests.helpers_startup import PYTHON, REPO, child_env

EXAMPLE = REPO / "docs" / "examples" / "own_pp"
BIN = Path(PYTHON).parent


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@pytest.fixture
def hosts() -> object:
    """Two namespaces, 10.77.0.1 and 10.77.0.2 over a veth pair; removed afterwards."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("network namespaces need root, ip and unshare")
    tag = uuid.uuid4().hex[:6]
    names = (f"pph{tag}a", f"pph{tag}b")
    made: list[str] = []
    try:
        for name in names:
            out = _ip("netns", "add", name)
            if out.returncode != 0:
                pytest.skip(f"ip netns add failed: {out.stderr.strip()}")
            made.append(name)
        steps = [("link", "add", f"v{tag}a", "type", "veth", "peer", "name", f"v{tag}b")]
        for i, name in enumerate(names):
            end = f"v{tag}{'ab'[i]}"
            steps += [("link", "set", end, "netns", name),
                      ("-n", name, "addr", "add", f"10.77.0.{i + 1}/24", "dev", end),
                      ("-n", name, "link", "set", end, "up"),
                      ("-n", name, "link", "set", "lo", "up")]
        for step in steps:
            out = _ip(*step)
            if out.returncode != 0:
                pytest.skip(f"ip {' '.join(step)} failed: {out.stderr.strip()}")
        yield names
    finally:
        for name in made:
            _ip("netns", "del", name)


def _job(hosts: tuple[str, str], tmp_path: Path,
         faked: str | None = None) -> tuple[Trace, list[str]]:
    """The two-node job, node 1 under ``faketime -f faked`` when given (every process it
    starts: pptrace run, torchrun, the rank); its trace and each node's output."""
    shutil.copytree(EXAMPLE, tmp_path / "own_pp")
    env = child_env()
    env.pop("PPTRACE_RUN_ID", None)  # each node draws its own, as two nodes would
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["GLOO_SOCKET_IFNAME"] = "eth0"
    procs = []
    for node, ns in enumerate(hosts):
        out = tmp_path / f"node{node}"
        # Node 1's launcher forks one process fewer before its rank than node 0's (which hosts
        # the rendezvous store): one spare fork gives both ranks the same pid, as containers do.
        spare = "/bin/true && " if node else ""
        # The monotonic clock moves too (by a constant: durations and timeouts stay right):
        # with it left real, libfaketime 0.9.10 makes time.sleep fail (EINVAL), which
        # torchrun's agent calls.
        fake = f"faketime -f {faked} " if node and faked is not None else ""
        run = (f"{spare}hostname samehost && cd {tmp_path / 'own_pp'} && PPTRACE_DIR={out} "
               f"GLOO_SOCKET_IFNAME=v{ns[3:9]}{'ab'[node]} "
               f"{fake}pptrace run --native-build off --target my_transport:attach_aux,pop_aux -- "
               f"torchrun --nnodes 2 "
               f"--nproc-per-node 1 --node-rank {node} --master-addr 10.77.0.1 "
               f"--master-port 29577 pp_script.py")
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, "unshare", "--uts", "--pid", "--fork", "--mount-proc",
             "sh", "-c", run], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    if any(p.returncode for p in procs):  # both nodes' output: one's failure may be the other's
        raise AssertionError("\n".join(
            f"node {n} exited {p.returncode}: {o[-3000:]}"
            for n, (p, o) in enumerate(zip(procs, outputs, strict=True))))
    trace = load_paths([str(tmp_path / "node0"), str(tmp_path / "node1")])
    assert len(trace.processes) == 2
    return trace, outputs


def _node1(trace: Trace) -> set[int]:
    node1 = {i for i, p in enumerate(trace.processes) if "node1" in " ".join(p.sources)}
    assert len(node1) == 1, [p.sources for p in trace.processes]
    return node1


@pytest.mark.slow
def test_two_hosts_one_hostname_equal_pid_namespaces_are_one_clean_job(
        hosts: tuple[str, str], tmp_path: Path) -> None:
    trace, outputs = _job(hosts, tmp_path)
    assert "2-node job" in outputs[0]
    assert len({p.rank.pid for p in trace.processes}) == 1, "the ranks should share a pid"
    assert {p.rank.host for p in trace.processes} == {"samehost"}
    assert len({p.rank.instance for p in trace.processes}) == 2
    findings = analyze(trace)
    assert [f for f in findings if f.severity is not Severity.INFO] == []
    report = render_text(trace, findings, Severity.ERROR)
    runs = {p.events[0].run_id for p in trace.processes if p.events}
    if len(runs) > 1:
        assert "joined as one job" in report
    # One hostname, two machines' clocks: node 1's (the last stage's) skewed behind or ahead,
    # the job stays clean (ahead, its attaches "follow" their extracts on one clock: the pairs
    # say the host has two clocks, and the same-host hint is not used).
    node1 = _node1(trace)
    for skew in (-20 * MS, -250 * MS, -5000 * MS, 20 * MS, 250 * MS, 5000 * MS):
        result = analysis(skewed(trace, node1, skew))
        assert [f.message for f in result.findings if f.severity is not Severity.INFO] == [], skew


@pytest.mark.slow
def test_a_node_under_faketime_is_aligned_and_clean(hosts: tuple[str, str],
                                                    tmp_path: Path) -> None:
    """Node 1's every process under ``faketime -f +5s``: the job runs, node 1's recorded wall
    clock runs 5 s ahead (its attaches "begin" seconds after their extracts on node 0 ended:
    only a clock off says so, and the alignment's bound from them holds it), and the job is
    clean. The attach/extract pairs go one way (node 1 to node 0), so they bound node 1's clock
    from one side: a clock behind would be causal as it is, and show nothing."""
    if shutil.which("faketime") is None:
        pytest.skip("faketime is not installed (apt-get install faketime; .ci/run installs it)")
    trace, _ = _job(hosts, tmp_path, "+5s")
    (node1,) = _node1(trace)
    result = analysis(trace)
    assert result.clocks.applied and result.clocks.consistent, result.clocks
    # Process 1's clock against process 0's (the reference): node 1's +5 s, or node 0's -5 s.
    offset = next(u.offset for u in result.clocks.units if 1 in u.processes)
    low, high = ((offset.low_ns, offset.high_ns) if node1 == 1
                 else (-offset.high_ns, -offset.low_ns))
    assert 4000 * MS <= low <= 5000 * MS <= high, offset
    assert [f.message for f in result.findings if f.severity is not Severity.INFO] == []
