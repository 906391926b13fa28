"""Crash safety: a recording process killed with SIGKILL leaves a trace file that loads, missing
at most the events of its last flush interval; a torn last line is reported, not fatal; SIGTERM
and a normal exit flush everything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pptrace.model.records import Direction
from tests.helpers_reliability import trace_files, write_good_trace

HERE = os.path.dirname(os.path.abspath(__file__))
INTERVAL = 0.25  # Config.flush_interval for the child (1 s by default)
# Beyond one interval, the time a flush itself may take on a busy 2-core machine.
FLUSH_SLACK = 0.75
RECORD_FOR = 3.0  # seconds of recording before the kill: most of it must be on disk


def _spawn(tmp_path: Path, how: str, pairs: int = 0) -> subprocess.Popen[str]:
    # The repository root: the helpers import their doubles as ``tests.doubles``.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE), HERE, os.environ.get("PYTHONPATH", "")]))
    env.pop("PPTRACE_ENABLED", None)
    if pairs:
        env["PPTRACE_TEST_PAIRS"] = str(pairs)
    code = ("import tests.helpers_reliability as h; "
            f"h.recording_child({str(tmp_path)!r}, {INTERVAL!r}, {how!r})")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=str(tmp_path))


def _run_until(proc: subprocess.Popen[str], pairs: int = 0,
               seconds: float = 0.0) -> dict[int, int]:
    """Read the child's progress until it has done ``pairs`` pairs or recorded for ``seconds``:
    {pair: monotonic ns}."""
    assert proc.stdout is not None
    done: dict[int, int] = {}
    deadline = time.monotonic() + 120
    first = 0
    for line in proc.stdout:
        if line.startswith("ready"):
            continue
        pair, mono = line.split()
        done[int(pair)] = int(mono)
        first = first or int(mono)
        if pairs and len(done) >= pairs:
            break
        if seconds and int(mono) - first >= seconds * 1e9:
            break
        if time.monotonic() > deadline:
            break
    return done


def _finish(proc: subprocess.Popen[str], done: dict[int, int]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=60)
    for line in out.splitlines():
        if line and not line.startswith("ready"):
            pair, mono = line.split()
            done[int(pair)] = int(mono)
    return proc.returncode, err


def _load(path: str) -> tuple[list[object], list[str]]:
    """Events and problems, through pptrace's loader."""
    from pptrace.load.loader import load_paths

    trace = load_paths([path])
    events = [e for p in trace.processes for e in p.events]
    return events, [str(p) for p in trace.problems]


def _pairs_in(events: list[object]) -> dict[Direction, set[int]]:
    seen: dict[Direction, set[int]] = {Direction.ATTACH: set(), Direction.EXTRACT: set()}
    for e in events:
        seen[e.direction].add(e.seq)  # type: ignore[attr-defined]
    return seen


@pytest.mark.slow
def test_sigkill_loses_at_most_the_last_flush_interval(tmp_path: Path) -> None:
    proc = _spawn(tmp_path, "recorder")
    try:
        done = _run_until(proc, seconds=RECORD_FOR)  # a dozen flushes
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.monotonic_ns()
        code, err = _finish(proc, done)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == -signal.SIGKILL, err
    (path,) = trace_files(str(tmp_path))
    events, problems = _load(path)
    # Only a torn last line may be reported; never an error.
    assert len(problems) <= 1, problems
    seen = _pairs_in(events)
    assert seen[Direction.ATTACH], "nothing was flushed before the kill"
    cutoff = killed_at - int((INTERVAL + FLUSH_SLACK) * 1e9)
    old = [pair for pair, mono in done.items() if mono < cutoff]
    assert len(old) > len(done) / 2, "the run was too short to check anything"
    lost = [pair for pair in old
            if not (pair in seen[Direction.ATTACH] and pair in seen[Direction.EXTRACT])]
    assert not lost, f"events older than one flush interval were lost: pairs {lost[:10]}"
    # And what was lost is only a tail: every event in the file is a prefix of the run.
    for direction, seqs in seen.items():
        assert seqs == set(range(len(seqs))), direction


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["sigterm", "exit"])
def test_sigterm_and_normal_exit_flush_everything(tmp_path: Path, ending: str) -> None:
    pairs = 200
    proc = _spawn(tmp_path, "startup", pairs=0 if ending == "sigterm" else pairs)
    try:
        done = _run_until(proc, pairs=pairs)
        if ending == "sigterm":
            os.kill(proc.pid, signal.SIGTERM)
        code, err = _finish(proc, done)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == (-signal.SIGTERM if ending == "sigterm" else 0), err
    (path,) = trace_files(str(tmp_path))
    events, problems = _load(path)
    assert not problems
    seen = _pairs_in(events)
    # Everything the child reported done is in the file (plus at most the call in flight).
    for direction in Direction:
        assert set(done) <= seen[direction], direction
        assert len(seen[direction]) - len(done) <= 1


# --- torn lines ---------------------------------------------------------------------------------


def _good_file(tmp_path: Path) -> tuple[str, list[str]]:
    path = write_good_trace(str(tmp_path / "t"))
    with open(path) as f:
        lines = f.read().splitlines(keepends=True)
    assert len(lines) >= 3
    return path, lines


def test_torn_last_line_is_reported_not_fatal(tmp_path: Path) -> None:
    from pptrace.load.loader import load_paths

    path, lines = _good_file(tmp_path)
    whole = load_paths([path])
    with open(path, "w") as f:
        f.writelines(lines[:-1])
        f.write(lines[-1][: len(lines[-1]) // 2])  # the writer died mid-line
    torn = load_paths([path])
    assert len(torn.problems) == 1
    problem = torn.problems[0]
    assert problem.source == path and problem.line == len(lines)
    assert "truncated" in problem.message or "torn" in problem.message
    assert "\n" not in str(problem)
    # Everything before the torn line is still there.
    lost = whole.event_count - torn.event_count
    assert 0 <= lost <= 2


def test_torn_line_in_the_middle_is_skipped_and_counted(tmp_path: Path) -> None:
    # A disk that filled mid-line and then had room again: the torn line is followed by more.
    from pptrace.load.loader import load_paths

    path, lines = _good_file(tmp_path)
    whole = load_paths([path])
    with open(path, "w") as f:
        f.write(lines[0][: len(lines[0]) // 3] + "\n")
        f.writelines(lines[1:])
    torn = load_paths([path])
    assert [p.line for p in torn.problems] == [1]
    assert 0 < whole.event_count - torn.event_count <= 2
