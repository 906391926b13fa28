"""The loader's second process (``pptrace.load.worker``) changes nothing but the time it takes.

Each test loads the same files twice, once with the worker forced on (the size threshold set to
zero) and once without it (``PPTRACE_LOAD_WORKERS=0``), and compares everything in the Trace.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pptrace.export.sinks import build_sink
from pptrace.load import worker as load_worker
from pptrace.load.loader import load_paths
from pptrace.model.config import Config
from pptrace.model.errors import SchemaVersionError, TraceInputError
from pptrace.model.records import RecorderStats
from pptrace.model.trace import Trace
from tests.helpers_analyze import Run, meta

pytestmark = pytest.mark.slow  # starts a worker process

SHARED = Path(__file__).parent / "data" / "third_party" / "jaeger-ui-otlp2jaeger-in.json"


def _write_run(directory: Path, steps: int = 40, pp: int = 2, tp: int = 2) -> None:
    """A pp x tp run written by pptrace's real exporter: one file per rank."""
    run = Run(pp_size=pp, tp_size=tp)
    for k in range(steps):
        run.step([meta("scores", (k % 3 + 1, 5)), meta("ids", (k % 3 + 1,), "int64")])
    run.attach([meta("scores", (2, 5))], error=("RuntimeError", "boom"))
    for proc in run.trace().processes:
        sink = build_sink(Config(trace_dir=str(directory)), proc.rank)
        for i in range(0, len(proc.events), 16):
            sink.export(list(proc.events[i : i + 16]))
        sink.export_stats(RecorderStats(rank=proc.rank, time_ns=1, recorded=len(proc.events),
                                        exported=len(proc.events)))
        sink.shutdown(1.0)


def _both(monkeypatch: pytest.MonkeyPatch, paths: list[str], rows: bool = True, **kw: Any
          ) -> tuple[Trace, Trace]:
    monkeypatch.setattr(load_worker, "MIN_PARALLEL_BYTES", 0)
    started: list[load_worker.Worker] = []
    real = load_worker.Worker.__init__

    def spy(self: load_worker.Worker, files: Any) -> None:
        real(self, files)
        started.append(self)

    monkeypatch.setattr(load_worker.Worker, "__init__", spy)
    taken: list[int] = []
    real_take = load_worker.take

    def take_spy(builder: Any, result: Any, rows: bytes) -> Any:
        taken.append(len(rows) // 40)
        return real_take(builder, result, rows)

    monkeypatch.setattr(load_worker, "take", take_spy)
    monkeypatch.setattr(load_worker, "_cpus", lambda: 2)
    monkeypatch.delenv("PPTRACE_LOAD_WORKERS", raising=False)
    parallel = load_paths(paths, **kw)
    # The worker ran and its result was taken (not its files read here again); cached spans
    # came back as rows.
    assert started and taken and (taken[0] > 0 or not rows), (started, taken)
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    serial = load_paths(paths, **kw)
    return parallel, serial


def test_a_worker_reads_exactly_what_this_process_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_run(tmp_path)
    files = sorted(tmp_path.iterdir())
    # The worker's share holds a torn last line, a line that is not JSON, and foreign spans.
    with files[-1].open("ab") as f:
        f.write(b"not json at all\n")
        f.write(SHARED.read_bytes().replace(b"\n", b"") + b"\n")
        f.write(b'{"resourceSpans": [')
    parallel, serial = _both(monkeypatch, [str(tmp_path)])
    assert parallel == serial
    assert parallel.event_count > 150 and len(parallel.problems) == 2
    assert len(parallel.foreign) == 2
    assert all(p.stats is not None for p in parallel.processes)
    # Shared records stay shared across the two processes' events.
    for proc in parallel.processes:
        assert len({id(e.rank) for e in proc.events}) == 1


def test_a_skipped_file_and_its_place_in_the_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_run(tmp_path)
    (tmp_path / "zz-empty.jsonl").write_bytes(b"")
    (tmp_path / "aa-binary.jsonl").write_bytes(b"\x00\x01\x02")
    parallel, serial = _both(monkeypatch, [str(tmp_path)])
    assert parallel == serial
    assert [p.message.split(":")[0] for p in parallel.problems] == ["file skipped"] * 2


def test_an_unsupported_schema_version_in_the_workers_share_is_the_same_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_run(tmp_path)
    last = sorted(tmp_path.iterdir())[-1]
    # (on each span in schema version 1, on the resource in version 2)
    text = re.sub(r'"pptrace\.schema_version","value":\{"intValue":"\d+"\}',
                  '"pptrace.schema_version","value":{"intValue":"99"}', last.read_text())
    assert '"intValue":"99"' in text
    last.write_text(text)
    errors = []
    for mode in ("parallel", "serial"):
        if mode == "serial":
            monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
        else:
            monkeypatch.setattr(load_worker, "MIN_PARALLEL_BYTES", 0)
            monkeypatch.setattr(load_worker, "_cpus", lambda: 2)
        with pytest.raises(SchemaVersionError) as info:
            load_paths([str(tmp_path)])
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "99" in errors[0] and str(last) in errors[0]


def test_numbers_beyond_int64_travel_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    _write_run(tmp_path, steps=10)
    last = sorted(tmp_path.iterdir())[-1]
    lines = last.read_text().splitlines()
    # A 20-digit monotonic clock (beyond int64, within what the fast path cuts) in the
    # worker's share, on a span whose shape the worker has already cached.
    doc = json.loads(lines[0])
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    attrs = spans[-1]["attributes"]
    mono = next(a for a in attrs if a["key"] == "pptrace.mono_ns")
    mono["value"]["intValue"] = "9" * 20
    lines[0] = json.dumps(doc, separators=(",", ":"))
    last.write_text("\n".join(lines) + "\n")
    parallel, serial = _both(monkeypatch, [str(tmp_path)])
    assert parallel == serial
    assert any(e.mono_ns == int("9" * 20) for p in parallel.processes for e in p.events)


def test_a_failing_worker_costs_only_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    _write_run(tmp_path)
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    serial = load_paths([str(tmp_path)])
    monkeypatch.delenv("PPTRACE_LOAD_WORKERS")
    monkeypatch.setattr(load_worker, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(load_worker, "_cpus", lambda: 2)
    real_popen = subprocess.Popen
    # A worker that dies at once, and one that answers garbage.
    for script in ("import sys; sys.exit(3)",
                   "import sys; sys.stdout.buffer.write(b'R' + (5).to_bytes(8, 'little') + "
                   "b'[1,2]' + b'A' + bytes(8))"):

        def popen(argv: list[str], *a: Any, script: str = script, **k: Any) -> Any:
            return real_popen([argv[0], "-c", script], *a, **k)

        monkeypatch.setattr(subprocess, "Popen", popen)
        assert load_paths([str(tmp_path)]) == serial
        monkeypatch.setattr(subprocess, "Popen", real_popen)
    # A worker that is another pptrace (another checkout or version): its answer is not taken.
    taken: list[int] = []
    monkeypatch.setattr(load_worker, "take", lambda *a: taken.append(1))
    monkeypatch.setattr(load_worker, "_MODULE", "/elsewhere/pptrace/load_worker.py")
    assert load_paths([str(tmp_path)]) == serial
    assert not taken


def test_progress_counts_both_processes_to_the_total(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_run(tmp_path, steps=400)
    seen: list[tuple[int, int]] = []
    _both(monkeypatch, [str(tmp_path)], progress=lambda d, t, s: seen.append((d, t)))
    total = sum(os.path.getsize(p) for p in tmp_path.iterdir())
    parallel_part = seen[: next(i for i in range(1, len(seen)) if seen[i][0] < seen[i - 1][0])]
    assert parallel_part[-1] == (total, total)
    assert all(t == total for _, t in parallel_part)


def test_too_little_input_or_one_file_needs_no_worker(tmp_path: Path) -> None:
    sizes = {"a": 10 << 20, "b": 10 << 20}
    assert load_worker.split_files(["a", "b"], sizes) == 0  # 20 MB: not worth a process
    big = {"a": 100 << 20, "b": 100 << 20, "c": 100 << 20, "d": 100 << 20}
    if load_worker._cpus() >= 2:
        assert load_worker.split_files(list(big), big) == 2
    assert load_worker.split_files(["a"], {"a": 1 << 40}) == 0


def test_a_bad_file_in_the_workers_share_names_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_run(tmp_path, steps=5)
    for f in sorted(tmp_path.iterdir()):
        f.write_bytes(b"\x7fELF not a trace\n")
    monkeypatch.setattr(load_worker, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(load_worker, "_cpus", lambda: 2)
    with pytest.raises(TraceInputError) as parallel:
        load_paths([str(tmp_path)])
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    with pytest.raises(TraceInputError) as serial:
        load_paths([str(tmp_path)])
    assert str(parallel.value) == str(serial.value)


# The attribute order pptrace wrote before the changing ones came first (``schema``).
_OLD_ORDER = ["pptrace.schema_version", "pptrace.direction", "pptrace.seq", "pptrace.run_id",
              "pptrace.rank", "pptrace.world_size", "pp_rank", "pptrace.pp_size", "tp_rank",
              "pptrace.tp_size", "pptrace.host", "pptrace.pid", "pptrace.thread.id",
              "pptrace.thread.name", "pptrace.mono_ns", "pptrace.duration_ns"]


def test_older_layouts_and_other_formats_in_the_workers_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers_analyze import otlp_to_jaeger

    _write_run(tmp_path, steps=30)
    files = sorted(tmp_path.iterdir())
    docs = [json.loads(line) for line in files[0].read_text().splitlines()]
    # Later files: one in the older attribute order (read by the fast path's older cut), one
    # as Jaeger JSON (the ordinary path).
    for path in files[2:]:
        out = []
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            for rs in doc["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for span in ss["spans"]:
                        # Before trace files left the direction to the span's name, it led.
                        attrs = span.setdefault("attributes", [])
                        if span["name"] in ("pptrace.attach", "pptrace.extract") and not any(
                                a["key"] == "pptrace.direction" for a in attrs):
                            attrs.append({"key": "pptrace.direction", "value": {
                                "stringValue": span["name"].removeprefix("pptrace.")}})
                        rank = {k: i for i, k in enumerate(_OLD_ORDER)}
                        attrs.sort(key=lambda a: rank.get(a["key"], 99))
            out.append(json.dumps(doc, separators=(",", ":")))
        path.write_text("\n".join(out) + "\n")
    (tmp_path / "zz-jaeger.json").write_text(json.dumps(otlp_to_jaeger(docs)))
    parallel, serial = _both(monkeypatch, [str(tmp_path)], rows=False)
    assert parallel == serial
    assert parallel.event_count > 100
    # The older layout still goes through the fast path's template cache.
    from pptrace.load.builder import TraceBuilder
    from pptrace.load.files import read_files

    builder = TraceBuilder()
    read_files([str(files[-1])], {str(files[-1]): 0}, builder, None)
    assert builder.fast.hits > 20 and builder.fast.misses < 10 and not builder.fast.own
