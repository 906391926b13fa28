"""Process identity: a process is (host, pid, instance id), never (host, pid) alone.

A restarted container reuses the pids of the run before it (its lines land in the same trace
file), and containers sharing one hostname give their ranks the same small pids. Each recorder
draws its own ``service.instance.id``, so neither case merges two processes; a trace written
before the key existed reads exactly as it did.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

import pptrace.record.engine as engine
from pptrace.analyze.analyzer import analyze
from pptrace.export.sinks import build_sink
from pptrace.load import worker as load_worker
from pptrace.load.loader import load_paths
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.findings import FindingKind
from pptrace.model.records import RankInfo
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output
from tests.helpers_analyze import Run, golden_run, meta

GOLDEN = Path(__file__).parent / "data" / "golden-pp2"


def healthy_run(run_id: str) -> Run:
    """The golden run's layout with every microbatch received as it was sent."""
    run = Run(pp_size=2, run_id=run_id)
    for k in range(6):
        tensors = [meta("topk_logprobs", (k + 2, 4)), meta("entropy", (k + 2,))]
        run.attach(tensors)
        run.extract(tensors)
    return run


def export(run: Run, directory: Path, instance: str,
           rank: Any = lambda r: r) -> None:
    """Write ``run`` through the real file encoder, each process under ``instance`` + its
    rank (and ``rank`` applied to its RankInfo)."""
    for proc in run.trace().processes:
        who = rank(dataclasses.replace(proc.rank, instance=f"{instance}{proc.rank.rank}"))
        sink = build_sink(Config(trace_dir=str(directory), run_id=run.run_id), who)
        sink.export([ev._replace(rank=who) for ev in proc.events])
        assert proc.stats is not None
        sink.export_stats(dataclasses.replace(proc.stats, rank=who))
        sink.shutdown(1.0)


def kinds(trace: Any) -> set[FindingKind]:
    return {f.kind for f in analyze(trace)}


def test_a_restarted_run_reusing_the_pids_is_its_own_processes(tmp_path: Path) -> None:
    export(healthy_run("first"), tmp_path, "a")
    export(golden_run(), tmp_path, "b")  # the same hosts and pids: appended to the same files
    assert len(list(tmp_path.iterdir())) == 2
    trace = load_paths([str(tmp_path)])
    assert not [p for p in trace.problems if "duplicate" in p.message]
    assert sorted(p.rank.instance for p in trace.processes) == ["a0", "a1", "b0", "b1"]
    assert [len(p.events) for p in trace.processes] == [6, 6, 6, 6]
    found = analyze(trace)
    mismatches = [f for f in found if f.kind is FindingKind.DTYPE_MISMATCH]
    assert mismatches, [f.kind for f in found]
    assert {e.run_id for p in trace.processes for e in p.events} == {"first", "golden"}


def test_one_host_and_one_pid_in_two_containers_are_two_processes(tmp_path: Path) -> None:
    export(golden_run(), tmp_path, "c", lambda r: dataclasses.replace(r, pid=7))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["pptrace-rank0-pid7.otlp.jsonl", "pptrace-rank1-pid7.otlp.jsonl"]
    trace = load_paths([str(tmp_path)])
    assert [(p.rank.rank, p.rank.host, p.rank.pid) for p in trace.processes] == [
        (0, "node0", 7), (1, "node0", 7)]
    assert [len(p.events) for p in trace.processes] == [6, 6]
    found = kinds(trace)
    assert FindingKind.DTYPE_MISMATCH in found
    assert FindingKind.EXTRACT_OFF_STAGE0 not in found


def test_the_same_instance_read_twice_is_still_one_process(tmp_path: Path) -> None:
    export(golden_run(), tmp_path / "one", "d")
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in (tmp_path / "one").iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    trace = load_paths([str(tmp_path / "one"), str(copy)])
    assert [len(p.events) for p in trace.processes] == [6, 6]
    assert any("12 duplicate events ignored" in p.message for p in trace.problems)


def test_an_old_trace_without_the_key_loads_as_before() -> None:
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(GOLDEN.iterdir()))
    assert schema.R_INSTANCE not in text  # written before the key existed
    trace = load_paths([str(GOLDEN)])
    want = golden_run().trace()
    assert [p.rank for p in trace.processes] == [p.rank for p in want.processes]
    assert all(p.rank.instance == "" for p in trace.processes)
    assert [len(p.events) for p in trace.processes] == [len(p.events) for p in want.processes]
    assert [f.kind for f in analyze(trace)] == [f.kind for f in analyze(want)]


def record(trace_dir: Path, extract_dtype: torch.dtype) -> Recorder:
    """A real recorder (rank found as a traced process finds it) that attaches and extracts."""
    cfg = Config(trace_dir=str(trace_dir), flush_interval=3600, native=False, run_id="run")
    rec = Recorder(cfg, sink_factory=lambda rank: build_sink(cfg, rank))
    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, rec)
    for _ in range(3):
        tensors: dict[str, Any] = {"next_token_ids": torch.arange(4)}
        attach(tensors, Output({"entropy": torch.zeros(2, dtype=extract_dtype)}))
        extract(tensors, Observer())
    rec.shutdown(timeout=10.0)
    assert (rec.dropped, rec.internal_errors) == (0, 0)
    return rec


def test_two_real_recorders_with_one_pid_append_to_one_file_and_stay_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getpid", lambda: 4242)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    first = record(tmp_path, torch.float32)
    second = record(tmp_path, torch.float16)
    (path,) = tmp_path.iterdir()  # the second run appended to the first's file
    assert path.name.endswith("-pid4242.otlp.jsonl")
    resources = {json.dumps(doc["resourceSpans"][0]["resource"], sort_keys=True)
                 for doc in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
    assert all(f'"{schema.R_INSTANCE}"' in r for r in resources)
    trace = load_paths([str(tmp_path)])
    assert not [p for p in trace.problems if "duplicate" in p.message]
    by_instance = {p.rank.instance: p for p in trace.processes}
    assert set(by_instance) == {first.instance, second.instance}
    assert first.instance != second.instance
    for rec, dtype in ((first, "float32"), (second, "float16")):
        proc = by_instance[rec.instance]
        assert proc.rank == dataclasses.replace(RankInfo(host=proc.rank.host, pid=4242),
                                                instance=rec.instance)
        assert len(proc.events) == 6
        assert {t.dtype for e in proc.events for t in e.tensors if t.name == "entropy"} == {dtype}


@pytest.mark.slow  # starts the loader's worker process
def test_the_loaders_worker_keeps_the_instances_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    export(healthy_run("first"), tmp_path, "a")
    export(golden_run(), tmp_path, "b")
    monkeypatch.setattr(load_worker, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(load_worker, "_cpus", lambda: 2)
    started: list[object] = []
    real = load_worker.Worker.__init__

    def spy(self: load_worker.Worker, files: Any) -> None:
        real(self, files)
        started.append(self)

    monkeypatch.setattr(load_worker.Worker, "__init__", spy)
    monkeypatch.delenv("PPTRACE_LOAD_WORKERS", raising=False)
    parallel = load_paths([str(tmp_path)])
    assert started  # one of the two files went through the worker
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    assert parallel == load_paths([str(tmp_path)])
    assert sorted(p.rank.instance for p in parallel.processes) == ["a0", "a1", "b0", "b1"]
