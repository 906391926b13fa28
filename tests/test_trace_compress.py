"""Compressed trace files (issue 17, item 2): each flush one complete gzip member (zstd frame).

Real recorders write through ``build_sink`` with ``compress="gzip"``; the files are read back
member by member with zlib alone (as ``gzip -dc`` reads them) and with pptrace's loader, and
compared with the same events written plain. A child process recording with gzip on is killed
with SIGKILL mid-run: the file reads to its last whole member, and a file cut inside a member
reads to the member before it.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch

import pptrace.record.engine as engine
from pptrace.export.segments import TraceSegments
from pptrace.export.sinks import build_sink
from pptrace.export.trace_file import encoder, trace_file_name
from pptrace.load.loader import load_paths
from pptrace.model.config import Config
from pptrace.model.errors import ConfigError
from pptrace.model.records import RankInfo
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport

RANK = RankInfo(rank=1, world_size=2, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1, host="h",
                pid=os.getpid())
REPO = Path(__file__).resolve().parent.parent


class Output:
    def __init__(self, n: int) -> None:
        self.n = n

    def to_pp_tensors(self) -> dict[str, torch.Tensor]:
        return {f"t{i}": torch.ones(2, i + 1) for i in range(self.n)}


class Observer:
    def from_pp_tensors(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return dict(tensors)


def record(trace_dir: Path, flushes: int = 4, pairs: int = 30, **config: Any) -> Recorder:
    """``flushes`` flushes of ``pairs`` real attach+extract pairs each, then the exit flush."""
    cfg = Config(trace_dir=str(trace_dir), flush_interval=3600, run_id="r", native=False,
                 **config)
    rec = Recorder(cfg, sink_factory=lambda rank: build_sink(cfg, rank),
                   rank_provider=lambda: (RANK, True))
    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, rec)
    for _ in range(flushes):
        for i in range(pairs):
            tensors: dict[str, Any] = {"next_token_ids": torch.arange(4)}
            assert attach(tensors, Output(1 + i % 3)) is None
            assert sorted(extract(tensors, Observer())) == [f"t{j}" for j in range(1 + i % 3)]
        rec.flush()
    rec.shutdown(timeout=10.0)
    assert (rec.dropped, rec.internal_errors, rec.export_errors) == (0, 0, 0)
    return rec


def members(data: bytes) -> tuple[list[bytes], list[int], bytes]:
    """The whole gzip members of ``data`` decompressed, where each ends in ``data``, and the
    bytes of a torn last one."""
    out: list[bytes] = []
    ends: list[int] = []
    at = 0
    while at < len(data):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            text = d.decompress(data[at:])
        except zlib.error:
            break
        if not d.eof:
            break
        out.append(text)
        at = len(data) - len(d.unused_data)
        ends.append(at)
    return out, ends, data[at:]


def spans_of(lines: list[bytes]) -> list[dict[str, Any]]:
    found = []
    for line in lines:
        doc = json.loads(line)
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                found.extend(ss["spans"])
    return found


def test_each_flush_is_one_whole_gzip_member_and_the_file_is_plain_gzip(tmp_path: Path) -> None:
    rec = record(tmp_path / "gz", compress="gzip")
    path = tmp_path / "gz" / trace_file_name(RANK, "gzip")
    assert os.listdir(tmp_path / "gz") == [path.name] and path.name.endswith(".otlp.jsonl.gz")
    data = path.read_bytes()
    whole, _, torn = members(data)
    assert torn == b""
    # One member per write: per flush its events, then its stats span; the exit flush's stats.
    assert len(whole) == 4 * 2 + 1
    assert all(m.endswith(b"\n") for m in whole)
    lines = gzip.decompress(data).splitlines()  # what gzip -dc gives
    assert lines == [ln for m in whole for ln in m.splitlines()]
    names = [s["name"] for s in spans_of(lines)]
    assert names.count("pptrace.attach") == names.count("pptrace.extract") == rec.recorded // 2


def test_compressed_traces_load_to_the_same_events_as_plain_ones(tmp_path: Path) -> None:
    record(tmp_path / "plain")
    record(tmp_path / "gz", compress="gzip")
    (plain,) = load_paths([str(tmp_path / "plain")]).processes
    (packed,) = load_paths([str(tmp_path / "gz")]).processes
    assert len(plain.events) == 4 * 30 * 2
    strip = [e._replace(start_ns=0, mono_ns=0, duration_ns=0) for e in plain.events]
    assert strip == [e._replace(start_ns=0, mono_ns=0, duration_ns=0) for e in packed.events]
    assert packed.stats is not None and packed.stats.final


def test_zstd_without_its_package_is_one_config_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if not installed: imports fail
    assert importlib.util.find_spec("zstandard") is None
    with pytest.raises(ConfigError, match=r"^PPTRACE_COMPRESS=zstd needs the zstandard package"):
        Config.from_env({"PPTRACE_COMPRESS": "zstd"})
    with pytest.raises(ConfigError, match="zstandard"):
        TraceSegments("t.otlp.jsonl", "zstd")


def test_each_flush_is_one_whole_zstd_frame_and_loads_as_plain(tmp_path: Path) -> None:
    """The real zstd path (``zstandard`` is in the ``zstd`` and ``dev`` extras)."""
    zstandard = importlib.import_module("zstandard")
    frame = encoder("zstd")(["{}"])
    assert zstandard.ZstdDecompressor().decompress(frame) == b"{}\n"
    rec = record(tmp_path / "zst", compress="zstd")
    record(tmp_path / "plain")
    path = tmp_path / "zst" / trace_file_name(RANK, "zstd")
    assert os.listdir(tmp_path / "zst") == [path.name] and path.name.endswith(".otlp.jsonl.zst")
    data, frames = path.read_bytes(), []
    while data:  # frame by frame: each one whole, of whole lines
        size = zstandard.frame_content_size(data)  # the writer's frames say their size
        reader = zstandard.ZstdDecompressor().decompressobj()
        frames.append(reader.decompress(data))
        assert len(frames[-1]) == size and frames[-1].endswith(b"\n")
        data = reader.unused_data
    assert len(frames) == 4 * 2 + 1  # per flush its events, then its stats span; the exit's
    names = [s["name"] for s in spans_of([ln for f in frames for ln in f.splitlines()])]
    assert names.count("pptrace.attach") == names.count("pptrace.extract") == rec.recorded // 2
    (plain,) = load_paths([str(tmp_path / "plain")]).processes
    (packed,) = load_paths([str(tmp_path / "zst")]).processes
    strip = [e._replace(start_ns=0, mono_ns=0, duration_ns=0) for e in plain.events]
    assert strip == [e._replace(start_ns=0, mono_ns=0, duration_ns=0) for e in packed.events]
    assert packed.stats is not None and packed.stats.final


@pytest.mark.parametrize(("env", "message"), [
    ({"PPTRACE_COMPRESS": "lz4"}, "PPTRACE_COMPRESS='lz4': expected none, gzip or zstd"),
    ({"PPTRACE_SCHEMA": "4"}, "PPTRACE_SCHEMA='4': expected 1, 2 or 3"),
])
def test_a_bad_value_is_one_line_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        Config.from_env(env)
    assert str(err.value) == message


CHILD = """
import os, sys, time, torch
import pptrace.record.engine as engine
from pptrace.export.sinks import build_sink
from pptrace.model.config import Config
from pptrace.model.records import RankInfo
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport

class Out:
    def to_pp_tensors(self):
        return {"scores": torch.ones(4, 8), "ids": torch.arange(4)}

class Obs:
    def from_pp_tensors(self, tensors):
        return dict(tensors)

cfg = Config(trace_dir=sys.argv[1], flush_interval=0.02, compress="gzip", native=False)
rank = RankInfo(rank=0, world_size=2, pp_rank=0, pp_size=2, host="h", pid=os.getpid())
rec = Recorder(cfg, sink_factory=lambda r: build_sink(cfg, r),
               rank_provider=lambda: (rank, True)).start()
attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                 engine.pop_auxiliary_output_from_pp_tensors, rec)
print("ready", flush=True)
while True:
    for _ in range(50):
        d = {"next_token_ids": torch.arange(4)}
        attach(d, Out())
        extract(d, Obs())
    time.sleep(0.001)
"""


@pytest.mark.slow
def test_sigkill_during_compressed_writing_leaves_a_file_that_reads_to_its_last_flush(
    tmp_path: Path,
) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PPTRACE_ENABLED", None)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            names = os.listdir(tmp_path)
            if names and os.path.getsize(tmp_path / names[0]) > 200_000:
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)  # while it writes: nothing flushed at exit
    finally:
        proc.kill()
        proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()
    (name,) = os.listdir(tmp_path)
    assert name.endswith(".otlp.jsonl.gz")
    data = (tmp_path / name).read_bytes()
    assert len(data) > 200_000
    whole, ends, torn = members(data)
    assert len(whole) >= 3 and torn == b""  # every write was one member, written whole
    spans = spans_of([ln for m in whole for ln in m.splitlines()])
    events = [s for s in spans if s["name"] != "pptrace.recorder"]
    assert len(events) > 1000
    (proc_trace,) = load_paths([str(tmp_path)]).processes
    assert len(proc_trace.events) == len(events)
    # Cut inside its last member (as a kill mid-write would): the file reads to the one before.
    cut = tmp_path / "cut"
    cut.mkdir(mode=0o700)
    cut_file = cut / name
    cut_file.write_bytes(data[:(ends[-2] + ends[-1]) // 2])
    whole_cut, _, torn_cut = members(cut_file.read_bytes())
    assert whole_cut == whole[:-1] and torn_cut
    loaded = load_paths([str(cut)])
    (cut_trace,) = loaded.processes
    cut_events = spans_of([ln for m in whole[:-1] for ln in m.splitlines()])
    # At least every whole member's events (a reader may also take the whole lines that the
    # torn member's first bytes decompress to), never more than the file held.
    kept = sum(s["name"] != "pptrace.recorder" for s in cut_events)
    assert kept <= len(cut_trace.events) <= len(events)
    assert loaded.problems and any(name in str(p) for p in loaded.problems)


def test_run_and_demo_take_the_file_options_as_the_variables() -> None:
    import argparse

    from pptrace.cli.tracing import add_export_arguments, export_env

    parser = argparse.ArgumentParser()
    add_export_arguments(parser)
    args = parser.parse_args(["--compress", "gzip", "--rotate-mb", "0.5", "--max-mb", "4"])
    env = export_env(args, {})
    assert (env["PPTRACE_COMPRESS"], env["PPTRACE_ROTATE_MB"], env["PPTRACE_MAX_MB"]) == (
        "gzip", "0.5", "4")
    cfg = Config.from_env(env)
    assert (cfg.compress, cfg.segment_bytes, cfg.max_bytes) == ("gzip", 500_000, 4_000_000)
    with pytest.raises(ConfigError, match="^PPTRACE_ROTATE_MB=5 is over PPTRACE_MAX_MB=4"):
        export_env(parser.parse_args(["--rotate-mb", "5", "--max-mb", "4"]), {})
