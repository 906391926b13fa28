"""Process life: SIGUSR1 dumps the flight ring, SIGTERM flushes then chains to the engine's own
handler, a forked child records on its own, and the environment alone decides activation."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pptrace.activation.startup import activate_from_env, active_recorder
from pptrace.model.records import Direction
from tests.helpers_reliability import read_trace_file
from tests.helpers_startup import CHILD_PRELUDE, PYTHON, REPO, child_env

SIGNALS = CHILD_PRELUDE + """
def engine_handler(signum, frame):  # the engine's own SIGTERM handler, set before pptrace
    print("engine handler", flush=True)
    sys.exit(3)


signal.signal(signal.SIGTERM, engine_handler)
pptrace.instrument(Config(mode="flight", trace_dir=out_dir, flush_interval=60))
attach(5)
os.kill(os.getpid(), signal.SIGUSR1)
deadline = time.time() + 20
while time.time() < deadline and not any(open(f).read() for f in glob.glob(out_dir + "/*")):
    time.sleep(0.05)
print("dumped", flush=True)
attach(3)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(30)
print("not reached", flush=True)
"""

FORK = CHILD_PRELUDE + """
pptrace.instrument(Config(trace_dir=out_dir, flush_interval=60))
attach(1)
pid = os.fork()
if pid == 0:
    attach(2)
    sys.exit(0)
os.waitpid(pid, 0)
print("child", pid, flush=True)
"""


def _attach_seqs(path: Path) -> list[int]:
    events, _, _ = read_trace_file(str(path))
    return [e.seq for e in events if e.direction is Direction.ATTACH]


def _run(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "child.py").write_text(script)
    return subprocess.run([PYTHON, str(tmp_path / "child.py"), str(tmp_path / "t")],
                          env=child_env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_sigusr1_dumps_and_sigterm_flushes_then_chains(tmp_path: Path) -> None:
    proc = _run(tmp_path, SIGNALS)
    assert proc.stdout.splitlines() == ["dumped", "engine handler"], proc.stderr
    assert proc.returncode == 3  # the engine's handler decided how to exit
    (path,) = (tmp_path / "t").glob("*.jsonl")
    assert _attach_seqs(path) == list(range(8))  # 5 dumped on SIGUSR1, 3 flushed on SIGTERM


@pytest.mark.slow
def test_a_forked_child_records_into_its_own_file(tmp_path: Path) -> None:
    proc = _run(tmp_path, FORK)
    assert proc.returncode == 0, proc.stderr
    child = int(proc.stdout.split()[1])
    files = {int(p.name.split("-pid")[1].split(".")[0]): p for p in (tmp_path / "t").glob("*")}
    assert len(files) == 2 and child in files
    assert _attach_seqs(files[child]) == [0, 1]  # its own recorder, its own sequence
    (parent,) = (p for pid, p in files.items() if pid != child)
    assert _attach_seqs(parent) == [0]  # nothing the child did, nothing twice


def test_the_environment_alone_decides_activation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PPTRACE_ENABLED", raising=False)
    assert activate_from_env() is None and active_recorder() is None
    monkeypatch.setenv("PPTRACE_ENABLED", "1")
    monkeypatch.setenv("PPTRACE_MODE", "turbo")
    assert activate_from_env() is None and active_recorder() is None  # never raises
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "turbo" in err and err.startswith("pptrace: ")
