"""An engine that drains on its own SIGTERM handler is traced to its last call, and the trace
says ``final`` only once that call is in.

A real child process: SGLang's transport module, the engine's SIGTERM handler set before
pptrace's (so pptrace chains to it), a few calls, then the process signals itself. The engine's
handler drains, either inside the handler (then ``sys.exit``) or by setting a flag that its main
loop reads (then a normal exit). Every call of the run must be in the trace file, in order, and
the last stats span must be final and count them all.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pptrace.model.records import Direction
from tests.helpers_reliability import read_trace_file
from tests.helpers_startup import CHILD_PRELUDE, PYTHON, REPO, child_env

DRAIN = CHILD_PRELUDE + """
how = sys.argv[2]
draining = []


def engine_handler(signum, frame):  # the engine's own SIGTERM handler, set before pptrace
    if how == "in-handler":
        attach(40)  # the engine drains its in-flight batches here
        print("drained", flush=True)
        sys.exit(0)
    draining.append(True)  # the main loop drains, then leaves


signal.signal(signal.SIGTERM, engine_handler)
pptrace.instrument(Config(trace_dir=out_dir, flush_interval=60))
attach(10)
os.kill(os.getpid(), signal.SIGTERM)
if how == "main-loop":
    for _ in range(100):  # the handler ran at the kill above: the flag is set
        if draining:
            attach(40)
            print("drained", flush=True)
            break
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["in-handler", "main-loop"])
def test_the_engines_sigterm_drain_is_traced_before_the_counts_are_final(
        tmp_path: Path, how: str) -> None:
    (tmp_path / "child.py").write_text(DRAIN)
    proc = subprocess.run([PYTHON, str(tmp_path / "child.py"), str(tmp_path / "t"), how],
                          env=child_env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["drained"], proc.stderr
    (path,) = (tmp_path / "t").glob("*.jsonl")
    events, stats, bad = read_trace_file(str(path))
    assert bad == []
    assert [e.seq for e in events if e.direction is Direction.ATTACH] == list(range(50))
    final = stats[-1]
    assert final.final and (final.recorded, final.exported, final.dropped) == (50, 50, 0)
    assert sum(s.final for s in stats) == 1  # final once, at the end
