"""Forks stay cheap: pptrace never waits in a fork, and a child forked right after activation
still records into its own file.

pptrace used to import the OTel SDK on a thread of its own after activation, and made each fork
wait for it (a fork in the middle of an import leaves the child a module lock no thread will
release): a fork right after activation took 0.18 s instead of 0.004 s, once 5.5 s. Now nothing
of pptrace's imports in the background and no fork handler runs before a fork, so a fork right
after activation costs what a bare fork in the same process costs, even when that import is slow
(the test makes it take 2 s).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pptrace.model.records import Direction
from tests.helpers_reliability import read_trace_file
from tests.helpers_startup import CHILD_PRELUDE, PYTHON, REPO, child_env

SCRIPT = CHILD_PRELUDE + """

def timed_fork(child):
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        child()
        sys.exit(0)  # through the exit flush
    took = time.perf_counter() - start
    os.waitpid(pid, 0)
    return pid, took


def bare_child():
    os._exit(0)


class SlowSdk:
    # Makes importing pptrace's sinks (the OTel SDK) take 2 s, as on a loaded machine.

    def find_spec(self, name, path, target=None):
        if name == "pptrace.export.sinks":
            time.sleep(2.0)
        return None


bare = sorted(timed_fork(bare_child)[1] for _ in range(5))[2]
sys.meta_path.insert(0, SlowSdk())
pptrace.instrument(Config(trace_dir=out_dir, flush_interval=60))  # armed: the module is loaded
threads = sorted(t.name for t in threading.enumerate())
sinks = sys.modules.get("pptrace.export.sinks")
done = sinks is not None and not getattr(sinks.__spec__, "_initializing", False)
pid, right_after = timed_fork(lambda: attach(2))  # the fork the engine makes right away
attach(1)
print(json.dumps({"bare": bare, "right_after": right_after, "child": pid, "threads": threads,
                  "sinks_imported": done}))
"""


def _attach_seqs(path: Path) -> list[int]:
    events, _, _ = read_trace_file(str(path))
    return [e.seq for e in events if e.direction is Direction.ATTACH]


@pytest.mark.slow
def test_a_fork_right_after_activation_costs_a_bare_fork_and_the_child_records(
    tmp_path: Path,
) -> None:
    (tmp_path / "fork.py").write_text(SCRIPT)
    proc = subprocess.run([PYTHON, str(tmp_path / "fork.py"), str(tmp_path / "t")],
                          env=child_env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    # Nothing of pptrace's is importing when the engine forks (the SDK was imported during
    # activation): no thread a fork would have to wait for, so no wait.
    assert [t for t in got["threads"] if t.startswith("pptrace") and t != "pptrace-recorder"] == []
    assert got["sinks_imported"]
    # The import takes 2 s here (SlowSdk): a fork that waited for it takes 2 s. A gross bound,
    # as on two loaded cores a bare fork varies from 0.01 to 0.05 s.
    assert got["right_after"] < 10 * got["bare"] + 0.5, got
    files = {int(p.name.split("-pid")[1].split(".")[0]): p for p in (tmp_path / "t").glob("*")}
    assert len(files) == 2 and got["child"] in files
    assert _attach_seqs(files[got["child"]]) == [0, 1]  # its own recorder, its own file
    (parent,) = (p for pid, p in files.items() if pid != got["child"])
    assert _attach_seqs(parent) == [0]
