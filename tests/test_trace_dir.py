"""A hostile trace directory cannot steer pptrace's writes (issue 15, item 8).

Real files, real symlinks, a FIFO, hard links, modes set with chmod and owners with chown (the
tests run as root, as an engine often does; the owner tests need root and say so). Every test
records real calls through the wrapped transport into a recorder whose sink is ``build_sink``'s
trace file: the engine's results never change, a refusal costs the events it holds (counted,
one warning line naming the path and why), and nothing outside the trace file is written.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import pptrace.record.engine as engine
from pptrace.export.sinks import build_sink
from pptrace.export.trace_file import TraceFile, TraceFileRefused, trace_file_name
from pptrace.model.config import Config
from pptrace.model.errors import ConfigError
from pptrace.model.records import RankInfo
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.helpers_startup import BARE_SGLANG, PYTHON, REPO, child_env, run_pptrace

RANK = RankInfo(rank=0, world_size=2, pp_rank=0, pp_size=2, tp_rank=0, tp_size=1, host="h",
                pid=os.getpid())
PAIRS = 5
IDS, SCORES = torch.arange(4), torch.ones(2, 3)
OTHER_UID = 54321  # a user that is not this process's (chown needs root)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@pytest.fixture(autouse=True)
def _no_umask() -> Iterator[None]:
    """umask 0: the modes seen are the modes pptrace asked for, not the umask's."""
    old = os.umask(0)
    yield
    os.umask(old)


class Output:
    def to_pp_tensors(self) -> dict[str, torch.Tensor]:
        return {"scores": SCORES}


class Observer:
    def from_pp_tensors(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return dict(tensors)


def record(trace_dir: Path, **config: object) -> Recorder:
    """Record PAIRS real attach+extract pairs into a trace file in ``trace_dir``, checking the
    engine's results on each; shut down."""
    cfg = Config(trace_dir=str(trace_dir), flush_interval=3600, **config)  # type: ignore[arg-type]
    rec = Recorder(cfg, sink_factory=lambda rank: build_sink(cfg, rank),
                   rank_provider=lambda: (RANK, True))
    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, rec)
    for _ in range(PAIRS):
        tensors = {"next_token_ids": IDS}
        assert attach(tensors, Output()) is None
        got = extract(tensors, Observer())
        assert got == {"scores": SCORES} and got["scores"] is SCORES
        assert list(tensors) == ["next_token_ids"]
        rec.flush()  # each pair meets the trace file: the refusal is counted and logged once
    rec.shutdown(timeout=5.0)
    return rec


def trace_path(trace_dir: Path) -> Path:
    return trace_dir / trace_file_name(RANK)


def assert_refused(rec: Recorder, caplog: pytest.LogCaptureFixture, *words: str) -> None:
    """Every event lost and counted; one warning line, naming the path and why."""
    stats = rec.stats()
    assert stats.recorded == 2 * PAIRS and stats.exported == 0
    assert stats.dropped == 2 * PAIRS and stats.export_errors >= 1
    lines = [r.getMessage() for r in caplog.records if "TraceFileRefused" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "\n" not in lines[0] and all(w in lines[0] for w in words), lines[0]


@pytest.fixture
def refusals(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="pptrace")
    return caplog


def test_a_new_directory_is_0700_and_the_file_0600(tmp_path: Path) -> None:
    trace_dir = tmp_path / "new" / "traces"
    rec = record(trace_dir)
    assert rec.exported == 2 * PAIRS
    assert stat.S_IMODE(trace_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(trace_path(trace_dir).stat().st_mode) == 0o600


def test_a_symlink_planted_under_the_file_name_is_never_followed(
    tmp_path: Path, refusals: pytest.LogCaptureFixture
) -> None:
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("root only\n")
    victim.chmod(0o600)
    trace_path(trace_dir).symlink_to(victim)
    rec = record(trace_dir)
    assert victim.read_text() == "root only\n"
    assert_refused(rec, refusals, str(trace_path(trace_dir)), "cannot be opened safely")


def test_a_dangling_symlink_creates_nothing_where_it_points(
    tmp_path: Path, refusals: pytest.LogCaptureFixture
) -> None:
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir(mode=0o700)
    target = tmp_path / "elsewhere" / "created-by-the-engine"
    target.parent.mkdir()
    trace_path(trace_dir).symlink_to(target)
    rec = record(trace_dir)
    assert not target.exists()
    assert_refused(rec, refusals, str(trace_path(trace_dir)))


def test_a_symlink_put_in_place_of_the_file_mid_run_is_not_followed(
    tmp_path: Path, refusals: pytest.LogCaptureFixture
) -> None:
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("root only\n")
    out = TraceFile(str(trace_path(trace_dir)))
    out.write_line("first")
    trace_path(trace_dir).unlink()
    trace_path(trace_dir).symlink_to(victim)
    with pytest.raises(TraceFileRefused, match="cannot be opened safely"):
        out.write_line("second")
    out.close()
    assert victim.read_text() == "root only\n"


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770])
def test_a_directory_other_users_can_write_to_is_refused_unless_told(
    tmp_path: Path, refusals: pytest.LogCaptureFixture, mode: int
) -> None:
    trace_dir = tmp_path / "shared"
    trace_dir.mkdir()
    trace_dir.chmod(mode)
    rec = record(trace_dir)
    assert os.listdir(trace_dir) == []
    assert_refused(rec, refusals, str(trace_dir), "writable by other users",
                   f"mode {mode:04o}", "PPTRACE_DIR_UNSAFE_OK=1")
    # Told otherwise, it is written; the file itself is still created safely.
    told = record(trace_dir, dir_unsafe_ok=True)
    assert told.exported == 2 * PAIRS
    assert stat.S_IMODE(trace_path(trace_dir).stat().st_mode) == 0o600


@as_root
def test_a_directory_of_another_user_is_refused(
    tmp_path: Path, refusals: pytest.LogCaptureFixture
) -> None:
    trace_dir = tmp_path / "pptrace-traces"  # as if pre-created by someone else
    trace_dir.mkdir(mode=0o755)
    os.chown(trace_dir, OTHER_UID, OTHER_UID)
    rec = record(trace_dir)
    assert os.listdir(trace_dir) == []
    assert_refused(rec, refusals, str(trace_dir), f"belongs to uid {OTHER_UID}")


@as_root
def test_a_file_of_another_user_is_not_appended_to(
    tmp_path: Path, refusals: pytest.LogCaptureFixture
) -> None:
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir(mode=0o700)
    planted = trace_path(trace_dir)
    planted.write_text("theirs\n")
    os.chown(planted, OTHER_UID, OTHER_UID)
    rec = record(trace_dir)
    assert planted.read_text() == "theirs\n"
    assert_refused(rec, refusals, str(planted), f"belongs to uid {OTHER_UID}")


def test_a_hard_link_to_another_file_is_not_appended_to(
    tmp_path: Path, refusals: pytest.LogCaptureFixture
) -> None:
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("root only\n")
    os.link(victim, trace_path(trace_dir))
    rec = record(trace_dir)
    assert victim.read_text() == "root only\n"
    assert_refused(rec, refusals, "2 hard links")


def test_a_fifo_under_the_file_name_cannot_block_the_open(
    tmp_path: Path, refusals: pytest.LogCaptureFixture
) -> None:
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir(mode=0o700)
    os.mkfifo(trace_path(trace_dir))
    done = threading.Event()
    recs: list[Recorder] = []
    worker = threading.Thread(target=lambda: (recs.append(record(trace_dir)), done.set()),
                              daemon=True)
    worker.start()
    assert done.wait(30), "opening the trace file blocked on a FIFO"
    assert_refused(recs[0], refusals, str(trace_path(trace_dir)))


def test_its_own_file_from_an_earlier_activation_is_appended_to(tmp_path: Path) -> None:
    trace_dir = tmp_path / "traces"
    first, second = record(trace_dir), record(trace_dir)
    assert first.exported == second.exported == 2 * PAIRS
    text = trace_path(trace_dir).read_text("ascii")
    assert text.count('"pptrace.attach"') == 2 * PAIRS


def test_the_knob_is_a_documented_variable() -> None:
    from pptrace.model.config import ENV_DOC

    assert "PPTRACE_DIR_UNSAFE_OK" in ENV_DOC
    assert Config.from_env({"PPTRACE_DIR_UNSAFE_OK": "1"}).dir_unsafe_ok is True
    assert Config.from_env({}).dir_unsafe_ok is False
    with pytest.raises(ConfigError, match="PPTRACE_DIR_UNSAFE_OK"):
        Config.from_env({"PPTRACE_DIR_UNSAFE_OK": "maybe"})


ENGINE = BARE_SGLANG + """
import torch
from sglang.srt.sampling.sampling_observer_pp import (
    add_auxiliary_output_to_pp_tensors as attach, pop_auxiliary_output_from_pp_tensors as extract)


class Out:
    def to_pp_tensors(self):
        return {"s": torch.ones(2)}


class Obs:
    def from_pp_tensors(self, tensors):
        return dict(tensors)


for i in range(4):
    d = {"next_token_ids": torch.tensor([i])}
    attach(d, Out())
    print("result", i, sorted(extract(d, Obs())), sorted(d), flush=True)
"""


@pytest.mark.slow
def test_under_pptrace_run_a_world_writable_directory_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    proc = run_pptrace(["--dir", str(shared), "--", PYTHON, str(script)],
                       child_env(PYTHONPATH=str(REPO)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"result {i} ['s'] ['next_token_ids']" for i in range(4)]
    assert os.listdir(shared) == []
    refused = [ln for ln in proc.stderr.splitlines() if "TraceFileRefused" in ln]
    assert len(refused) == 1 and str(shared) in refused[0], proc.stderr
    assert "writable by other users (mode 1777)" in refused[0]
    # The exit summary counts the loss.
    assert any("8 events recorded, 8 dropped" in ln for ln in proc.stderr.splitlines()), \
        proc.stderr
