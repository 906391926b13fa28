"""Overload keeps the SIGKILL promise (issue 15, item 7): with threads recording far faster than
the recorder thread can write, a SIGKILL at a random moment leaves a trace whose events on disk
plus the events its last stats span counts as dropped cover everything recorded up to one flush
interval (plus ``SLACK``) before the kill.

The child (``tests.helpers_reliability.overload_child``) records on four threads as fast as they
go (tens of thousands of events a second, starving every other thread of the GIL) and writes
progress samples, "at least N recorded by time t", into a memory-mapped file, so that they stay
dense however starved the process's other threads are. The kill's time is taken on the same
clock (CLOCK_MONOTONIC is system-wide).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers_reliability import PROGRESS, PROGRESS_SLOTS, read_progress, trace_files

ROOT = Path(__file__).resolve().parent.parent
INTERVAL = 1.0  # Config.flush_interval for the child (the default)
#: Beyond one interval: how late the recorder thread itself runs (its last chunk's and its stats
#: span's overrun of the deadline, its waits for the GIL against four threads that never wait
#: and for a CPU). Measured on the shared 2-core machine at load averages of 6 to 13: windows of
#: 0.08 to 0.85 s mostly, once 2.1 s; see docs/security.md, crash safety.
SLACK = 1.0
THREADS = 4
KILLS = 4


def _spawn(trace_dir: Path, progress: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    env.pop("PPTRACE_ENABLED", None)
    code = ("import tests.helpers_reliability as h; "
            f"h.overload_child({str(trace_dir)!r}, {INTERVAL!r}, {THREADS!r}, "
            f"{str(progress)!r})")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))


def _kill_at_random(tmp_path: Path, rng: random.Random) -> dict[str, float]:
    """One child, killed 3.5-6 s after it started recording; what its trace covers."""
    from pptrace.load.loader import load_paths

    tmp_path.mkdir()
    trace_dir, progress = tmp_path / "t", tmp_path / "progress"
    progress.write_bytes(bytes(PROGRESS.size * PROGRESS_SLOTS))
    proc = _spawn(trace_dir, progress)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", (line, proc.stderr.read() if proc.stderr else "")
        time.sleep(rng.uniform(3.5, 6.0))
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic_ns()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, err
    samples = read_progress(str(progress))
    assert len(samples) > 100, len(samples)
    (path,) = trace_files(str(trace_dir))
    trace = load_paths([path])
    (process,) = trace.processes
    events, last = process.events, process.stats
    assert last is not None, "no stats span on disk after seconds of recording"
    assert len({(e.direction, e.seq) for e in events}) == len(events)  # each once
    # The last stats span's counts are consistent with the file: what it says was exported is
    # there (and what was written after it too), never more than was recorded.
    assert last.exported <= len(events) <= samples[-1][1], (last, len(events))
    assert last.exported + last.dropped <= last.recorded, last
    covered = len(events) + last.dropped
    cutoff = killed - int((INTERVAL + SLACK) * 1e9)
    before = [n for t, n in samples if t <= cutoff]
    assert before, "the run was too short to check anything"
    assert covered >= before[-1], (
        f"{before[-1]} events were recorded more than {INTERVAL + SLACK} s before the kill, "
        f"but the file holds {len(events)} and its last stats span counts {last.dropped} "
        f"dropped")
    # The measured bound: the age at the kill of the first moment more was recorded than the
    # trace covers (some event recorded by then is neither on disk nor counted).
    first_uncovered = next((t for t, n in samples if n > covered), killed)
    seconds = (samples[-1][0] - samples[0][0]) / 1e9
    return {"window_s": (killed - first_uncovered) / 1e9,
            "offered_per_s": (samples[-1][1] - samples[0][1]) / seconds,
            "on_disk": len(events), "dropped": last.dropped, "recorded": samples[-1][1]}


@pytest.mark.slow
def test_sigkill_under_overload_loses_at_most_one_interval_uncounted(tmp_path: Path) -> None:
    # Seeded, and the seed said: PPTRACE_TEST_SEED=N replays a failing run's kill times.
    seed = int(os.environ.get("PPTRACE_TEST_SEED") or random.SystemRandom().randrange(2**32))
    print(f"PPTRACE_TEST_SEED={seed}")
    rng = random.Random(seed)
    runs = [_kill_at_random(tmp_path / str(i), rng) for i in range(KILLS)]
    runs = [{"seed": seed, **run} for run in runs]  # every assertion message names the seed
    for run in runs:
        print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in run.items()))
    # The runs were overloaded: the recorder thread could not write what came, and counted it.
    assert all(run["dropped"] > 0 for run in runs), runs
    assert max(run["window_s"] for run in runs) <= INTERVAL + SLACK, runs
