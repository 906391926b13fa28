"""A rank whose clock really is off (issue 22): the sample pipeline's ranks each in a process of
its own, the last stage's under ``faketime`` (libfaketime: CLOCK_REALTIME shifted by +5 s or
-250 ms through LD_PRELOAD, the monotonic clock left real, which gloo's timeouts use). The
recorded wall-clock times really moved (against the monotonic clock, which the ranks share on
this machine); the alignment's bounds hold the true skew; the analysis finds what the run without
faketime finds, with the same first divergence; no receive ends before its send began once
aligned; and the faked trace, moved back by the skew in-process, is judged word for word alike.

Where ``faketime`` is missing (``.ci/run`` installs it as root) or does not shift a process's wall
clock, the tests say so and skip.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import time
from typing import Any

import pytest
from pptrace_samples.options import PipelineOptions

from pptrace.analyze.analyzer import Analysis, analysis
from pptrace.load.loader import load_paths
from pptrace.model.findings import Category
from pptrace.model.trace import Trace
from tests.helpers_clocks import MS, backwards, first, near_firsts, on_hosts, said, skewed
from tests.helpers_core import scratch
from tests.helpers_startup import PYTHON, child_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: One rank of the sample pipeline in a process of its own (the launcher's fork server would
#: give every rank the one environment, and LD_PRELOAD must reach one rank only).
_RANK = """
import json, os, sys
from pptrace_samples.options import PipelineOptions
from pptrace_samples.pipeline import run_rank
opts = json.loads(sys.argv[1])
opts["env"] = tuple(map(tuple, opts["env"]))
report = run_rank(PipelineOptions(**opts), int(sys.argv[2]), lambda rank, steps: None)
sys.stdout.flush()
sys.stderr.flush()
os._exit(report.exit_code)  # as the launcher's ranks do: no gloo teardown
"""

#: The monotonic clock stays real: gloo's timeouts and the recorder's pace run on it.
_KEEP_MONOTONIC = {"FAKETIME_DONT_FAKE_MONOTONIC": "1"}

#: The trace whole on a loaded machine: a write that cannot finish within a flush interval
#: (the sample's 0.5 s, at least 1 s) counts what it could not write as dropped (its promise to a
#: kill), and under faketime on a loaded machine the faked rank's writes missed it (all six of
#: its attaches dropped once, its channel then `missing-rank`; libfaketime also interposes the
#: timed waits the recorder's thread sleeps in). These tests judge clocks, not the pace
#: (tests/test_reliability*.py do): a minute to write, a minute at exit; the comparison below
#: still fails, naming the losses, should a rank drop anyway.
_WHOLE = (("PPTRACE_EXIT_TIMEOUT", "60"),)

SKEWS = (("+5s", 5000 * MS), ("-0.25s", -250 * MS))
FAULTS = (None, "recv-hangs", "dtype-in-transit")


def _shift_ns(spec: str) -> int:
    """How far ``faketime -f spec`` moves a process's wall clock from its monotonic clock."""
    probe = "import time; print(time.time_ns() - time.monotonic_ns())"
    plain = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, timeout=60)
    faked = subprocess.run(["faketime", "-f", spec, PYTHON, "-c", probe], capture_output=True,
                           text=True, timeout=60, env={**child_env(), **_KEEP_MONOTONIC})
    if faked.returncode != 0:
        pytest.skip(f"faketime -f {spec} python failed: {faked.stderr.strip()[-500:]}")
    return int(faked.stdout) - int(plain.stdout)


@pytest.fixture(scope="module")
def faketime() -> None:
    if shutil.which("faketime") is None:
        pytest.skip("faketime is not installed (apt-get install faketime; .ci/run installs it)")
    for spec, skew in SKEWS:
        moved = _shift_ns(spec)
        if abs(moved - skew) > 50 * MS:
            pytest.skip(f"faketime -f {spec} moved the wall clock {moved / MS:+.1f} ms from "
                        f"the monotonic one, not {skew / MS:+.0f} ms")


def _run(fault: str | None, spec: str | None) -> tuple[Trace, tuple[int, ...], str]:
    """One real run, the last stage's rank under ``faketime -f spec`` (None: no faketime);
    its trace, its ranks' exit codes and their output."""
    out, store = scratch("pptrace-faketime-"), scratch("pptrace-faketime-store-")
    opts = PipelineOptions(ranks=2, steps=6, comm_timeout=4.0, fault=fault, out_dir=out,
                           run_id=f"faketime-{fault}-{spec}", env=_WHOLE, flush_interval=60,
                           store_path=os.path.join(store, "store")).resolved()
    doc = json.dumps(dataclasses.asdict(opts))
    procs = []
    for rank in range(opts.ranks):
        cmd, env = [PYTHON, "-c", _RANK, doc, str(rank)], child_env()
        if spec is not None and rank == opts.ranks - 1:
            cmd, env = ["faketime", "-f", spec, *cmd], {**env, **_KEEP_MONOTONIC}
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    try:
        outputs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    shutil.rmtree(store, ignore_errors=True)
    trace = load_paths([out])
    shutil.rmtree(out, ignore_errors=True)
    assert not trace.problems, trace.problems
    return trace, tuple(p.returncode for p in procs), "\n".join(o[-2000:] for o in outputs)


def _found(result: Analysis) -> list[tuple[Any, ...]]:
    """The findings about the run, each as (kind, channel, ranks, microbatch). Not their words:
    another run has its own seconds, its own order of two nearly simultaneous events, and in a
    deadlock whichever rank's timeout fires first is the one whose error says so (the other's
    says the connection closed). Nor the recorder's own losses (``events-dropped``...): on a
    loaded machine a rank's last flush may miss its deadline in one run and not the next."""
    return sorted((f.kind.value, f.channel, f.ranks, f.microbatch) for f in result.findings
                  if f.kind.category is not Category.RECORDER_LOSS)


def _seqs(trace: Trace) -> list[tuple[int, str, int, int]]:
    """Per process: its rank, and its attaches' and extracts' lowest seqs and counts (a run
    whose first calls are missing judges a later first microbatch)."""
    out = []
    for p in trace.processes:
        for d in ("attach", "extract"):
            seqs = [e.seq for e in p.events if e.direction.value == d]
            out.append((p.rank.rank, d, min(seqs, default=-1), len(seqs)))
    return out


def _wall_ahead_ns(trace: Trace, process: int) -> float:
    """How far ``process``'s wall clock ran ahead of process 0's, from their records (both
    stamp the machine's one monotonic clock beside their own wall clock)."""
    def wall_minus_mono(i: int) -> float:
        return statistics.median(m.wall_ns - m.mono_ns for m in trace.processes[i].messages
                                 if m.wall_ns and m.mono_ns)
    return wall_minus_mono(process) - wall_minus_mono(0)


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f or "healthy")
def test_a_rank_under_faketime_changes_no_finding(faketime: None, fault: str | None) -> None:
    base_trace, base_codes, _ = _run(fault, None)
    last = len(base_trace.processes) - 1
    assert abs(_wall_ahead_ns(base_trace, last)) < 50 * MS
    base = analysis(base_trace)
    for spec, skew in SKEWS:
        trace, codes, output = _run(fault, spec)
        where = f"{fault or 'healthy'}, rank {last} under faketime -f {spec}"
        if codes != base_codes:
            pytest.skip(f"{where}: the ranks exited {codes}, without faketime {base_codes} "
                        f"(faketime misbehaves with torch here?): {output[-1500:]}")
        # The wall-clock times it recorded really moved, and pairing on them raw runs back.
        assert abs(_wall_ahead_ns(trace, last) - skew) < 50 * MS, where
        result = analysis(trace)
        assert backwards(trace, result.message_pairs), where
        # The alignment's bounds hold the true skew, and the aligned trace runs forward.
        assert result.clocks.applied and result.clocks.consistent, where
        offset = next(u.offset for u in result.clocks.units if last in u.processes)
        assert offset.low_ns <= skew <= offset.high_ns, (where, offset)
        assert backwards(result.trace, result.message_pairs) == [], where
        # Judged as the run without faketime: the same findings, each where it was ...
        assert _found(result) == _found(base), (where, said(result), said(base),
                                                _seqs(trace), _seqs(base_trace))
        # (the same first divergence, or one the run without faketime had within its run-to-run
        # jitter of it: in recv-hangs both stages end up waiting, 0.4 to 4 ms apart, and which
        # of them waits first varies from run to run, faketime or not)
        assert first(result) in near_firsts(base, 50 * MS), (where, first(result), first(base))
        # ... and, word for word, as its own trace moved back by the skew: each stage named as
        # a host of its own (as two hosts would name themselves), so that both have two clocks.
        hosts = on_hosts(trace, lambda p: f"node{p.rank.pp_rank}")
        on_two = analysis(hosts)
        back = analysis(skewed(hosts, {last}, -skew))
        assert on_two.trace == back.trace, where  # faketime moves the clock by exactly the skew
        assert [f.message for f in back.findings] == [f.message for f in on_two.findings], where


def test_the_probe_sees_faketime_move_the_wall_clock_only(faketime: None) -> None:
    """The shift the fixture checks is faketime's: "+0s" moves nothing, and the monotonic clock
    stays real (gloo's timeouts run on it)."""
    assert abs(_shift_ns("+0s")) < 50 * MS
    probe = "import time; print(time.monotonic_ns())"
    before = time.monotonic_ns()
    faked = subprocess.run(["faketime", "-f", "+5s", PYTHON, "-c", probe], capture_output=True,
                           text=True, timeout=60, env={**child_env(), **_KEEP_MONOTONIC})
    assert before <= int(faked.stdout) <= time.monotonic_ns()
