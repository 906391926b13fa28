"""Export benchmark: how fast the recorder thread writes events, and whether anything is lost.

    python benchmarks/bench_export.py                       # all rows, 3 repeats
    python benchmarks/bench_export.py --rate 20000 --seconds 5 --repeats 5
    python benchmarks/bench_export.py --only files --seconds 60   # the trace-file figures

Rows (each repeat runs every row once, interleaved; figures are medians over repeats):

- ``file``: events per second the recorder thread turns into spans and writes as OTLP/JSON lines
  (``Recorder.flush`` over a buffer of real attach/extract records: ``FileSink`` encodes the raw
  tuples through its per-shape templates), and beside it, on the same records, the path that
  builds ``Event`` records first (conversion, then ``FileSink`` from records), in us of CPU per
  event;
- ``otlp grpc`` / ``otlp http``: the same events through pptrace's OTLP exporter to a local
  receiver (``tests/otlp_receiver.py``), timed until the receiver holds every span; skipped with a
  note when that receiver is not there;
- ``sustained``: a producer thread offers ``--rate`` events per second for ``--seconds`` seconds in
  stream mode, writing files, with the background thread running (once calling the wrapped
  attach+extract, once appending recorded events directly so that the rate is reached even where
  the calls alone cannot run that fast); then the recorder shuts down with its default exit
  timeout. It prints what was recorded,
  exported and dropped (the stream mode must drop nothing while the buffer has room), the backlog
  the recorder thread had at the end, and what the exit flush did with it.

The trace-file figures (``--only files``, also part of a full run):

- ``bytes per event``: real attach/extract calls with 1, 3 (the demo's payload: top-k log-probs,
  ids and entropy of a batch of 8) and 16 tensors, written as schema version 1 and 2, plain,
  gzip and zstd (when ``zstandard`` is importable), flushed every ``--per-flush`` events (50: a
  second of a stage at 50 decode steps/s); bytes on disk per event, and the recorder thread's
  CPU per event in the flush (encoding and compression). "fp": with fingerprints (as the demo
  records), over tensors whose contents change every call;
- ``bytes per message span``: the message layer's spans of a demo run (``demo_messages``: a
  proxy send, an output message's receive begin and end, its send; fingerprints on), written
  through the same sink as schema version 1 and 2, plain and compressed;
- ``sustained, compressed``: the sustained row with gzip on;
- ``soak``: ``--rate`` events/s for ``--seconds`` s into a budget (``--soak-max-mb`` 8,
  ``--soak-segment-mb`` 1): disk and resident memory sampled every 100 ms; disk never above the
  budget plus one segment, memory flat (last tenth against the second), every event accounted
  for (recorded = in the files + rotated + dropped, the files read with pptrace's loader).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pptrace.engines.sglang_load import load_transport_module
from pptrace.export.sinks import build_sink
from pptrace.model.config import Config
from pptrace.model.records import RankInfo, TensorMeta
from pptrace.record.convert import Converter as _Converter
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport

ROOT = Path(__file__).resolve().parent.parent
RANK = RankInfo(rank=0, world_size=1, pp_rank=0, pp_size=1, tp_rank=0, tp_size=1,
                host="bench", pid=os.getpid())


class Output:
    def __init__(self, n: int) -> None:
        self.named = {f"t{i}": torch.zeros(8, 4) for i in range(n)}

    def to_pp_tensors(self) -> dict[str, torch.Tensor]:
        return self.named


class Observer:
    def from_pp_tensors(self, tensors: Any) -> Any:
        return tensors


def transport(rec: Recorder) -> tuple[Callable[..., Any], Callable[..., Any]]:
    mod = load_transport_module(allow_bare=True)
    if mod is None:
        import pptrace.record.engine as mod
    return wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                          mod.pop_auxiliary_output_from_pp_tensors, rec)


def fill(rec: Recorder, events: int, tensors: int = 4) -> None:
    """Record ``events`` real events (half attach, half extract) into ``rec``'s buffer."""
    attach, extract = transport(rec)
    out, obs, ids = Output(tensors), Observer(), torch.zeros(8, dtype=torch.long)
    for _ in range(events // 2):
        d = {"next_token_ids": ids}
        attach(d, out)
        extract(d, obs)


def recorder(config: Config, sink_factory: Callable[[RankInfo], Any]) -> Recorder:
    return Recorder(config, sink_factory=sink_factory, rank_provider=lambda: (RANK, True))


# --- file -----------------------------------------------------------------------------------


def file_row(tmp: str, events: int) -> dict[str, float]:
    """Events per second through Recorder.flush to a file, and per-event costs side by side (us
    of recorder-thread CPU): the flush as the recorder runs it (raw tuples through FileSink's
    per-shape templates: with the native library loaded, each run of them through its
    renderer), the same flush of the same raws with the Python loop alone (``PPTRACE_NATIVE=0``
    for the flush), and the record path both replace (raw -> Event, then FileSink from Event
    records)."""
    config = Config(trace_dir=tmp, flush_interval=3600)
    rec = recorder(config, lambda rank: build_sink(config, rank))
    fill(rec, events)
    raws = list(rec._buf)
    clock = time.thread_time
    t0 = clock()
    convert = _Converter(rec, RANK)  # one per flush, as Recorder.flush uses it
    converted = [convert(r) for r in raws]
    t1 = clock()
    sink = build_sink(Config(trace_dir=tmp + "/records", flush_interval=3600), RANK)
    t2 = clock()
    for start in range(0, len(converted), 512):
        sink.export(converted[start:start + 512])  # a plain list: the record path
    t3 = clock()
    sink.shutdown(1.0)
    start = time.perf_counter()
    c0 = clock()
    done = rec.flush()
    c1 = clock()
    wall = time.perf_counter() - start
    rec.shutdown(2.0)
    assert done == events, (done, events)
    python = Config(trace_dir=tmp + "/python", flush_interval=3600, native=False)
    alone = recorder(python, lambda rank: build_sink(python, rank))
    alone._buf.extend(raws)  # the same raws (packed ones too: decoded without the renderer)
    c2 = clock()
    assert alone.flush() == events
    c3 = clock()
    alone.shutdown(2.0)
    n = len(raws)
    return {
        "events/s": events / wall,
        "flush": (c1 - c0) / n * 1e6,
        "flush, Python loop": (c3 - c2) / n * 1e6,
        "record path": (t3 - t0) / n * 1e6,
        "of which to_event": (t1 - t0) / n * 1e6,
        "FileSink(Event)": (t3 - t2) / n * 1e6,
    }


# --- OTLP -----------------------------------------------------------------------------------


def otlp_row(protocol: str, events: int) -> dict[str, float] | None:
    """Events per second to a local OTLP receiver, timed until it holds them all."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from otlp_receiver import Receiver
    except ImportError:
        return None
    finally:
        sys.path.pop(0)
    with Receiver(protocol) as rx:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = rx.endpoint
        os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = rx.env_protocol
        config = Config(exporters=("otlp",), flush_interval=3600, exit_timeout=30.0)
        rec: Recorder = recorder(config, lambda rank: build_sink(
            config, rank, on_drop=rec.exporter_dropped))
        fill(rec, events)
        start = time.perf_counter()
        rec.flush()
        deadline = time.monotonic() + 120
        while _received(rx) < events - rec.dropped and time.monotonic() < deadline:
            time.sleep(0.01)
        wall = time.perf_counter() - start
        rec.shutdown(30.0)
        got = _received(rx)
    return {"events/s": got / wall, "received": float(got), "dropped": float(rec.dropped)}


def _received(rx: Any) -> int:
    with rx._lock:
        requests = list(rx.requests)
    return sum(
        1
        for req in requests
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
        if span.name != "pptrace.recorder"
    )


# --- sustained ------------------------------------------------------------------------------


def sustained_row(tmp: str, rate: int, seconds: float, raw: bool,
                  compress: str = "none") -> dict[str, float]:
    """A paced producer at ``rate`` events/s with the recorder thread running (stream, files).

    ``raw``: the producer appends copies of a real recorded event (fresh sequence numbers) as the
    wrapper would, so that the offered rate is reached even where the wrapped calls alone could
    not run that fast on this machine; otherwise it calls the wrapped attach+extract.
    """
    config = Config(trace_dir=tmp, compress=compress)
    rec = recorder(config, lambda rank: build_sink(config, rank)).start()
    attach, extract = transport(rec)
    out, obs, ids = Output(4), Observer(), torch.zeros(8, dtype=torch.long)
    if raw:
        probe = recorder(Config(flush_interval=3600), lambda rank: None)
        fill(probe, 2)
        templates = list(probe._buf)
        append, seqs = rec.append, [rec.seq[t[0]] for t in templates]

        def pair() -> None:
            for t, s in zip(templates, seqs, strict=True):
                append((t[0], next(s), time.time_ns(), time.monotonic_ns(), *t[4:]))
    else:

        def pair() -> None:
            d = {"next_token_ids": ids}
            attach(d, out)
            extract(d, obs)

    pairs_per_s = rate / 2
    done = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        due = int((now - start) * pairs_per_s)
        if done >= due:
            time.sleep(0.0005)
            continue
        for _ in range(due - done):
            pair()
        done = due
    elapsed = time.perf_counter() - start
    during = rec.stats()
    backlog = len(rec._buf)
    t0 = time.perf_counter()
    rec.shutdown()  # the default exit timeout
    exit_s = time.perf_counter() - t0
    after = rec.stats()
    return {
        "offered/s": 2 * done / elapsed,
        "recorded": float(during.recorded),
        "exported during run": float(during.exported),
        "dropped during run": float(during.dropped),
        "backlog at end": float(backlog),
        "exported after exit": float(after.exported),
        "dropped after exit": float(after.dropped),
        "exit flush s": exit_s,
    }


# --- trace files ----------------------------------------------------------------------------

DEMO = (("topk_logprobs", (8, 4), torch.float32), ("topk_ids", (8, 4), torch.int64),
        ("entropy", (8,), torch.float32))


class Payload:
    """An output of ``n`` tensors (3: the demo's), fresh contents per call when ``fresh``."""

    def __init__(self, n: int, fresh: bool = False) -> None:
        spec = DEMO if n == 3 else tuple((f"t{i}", (8, 4), torch.float32) for i in range(n))
        self.named = {name: torch.zeros(shape, dtype=dtype) for name, shape, dtype in spec}
        self.fresh = fresh

    def to_pp_tensors(self) -> dict[str, torch.Tensor]:
        if self.fresh:
            return {k: torch.randint(0, 1000, v.shape).to(v.dtype) for k, v in self.named.items()}
        return self.named


def bytes_row(tmp: str, n: int, version: int, compress: str, fingerprint: bool, events: int,
              per_flush: int) -> tuple[float, float]:
    """Bytes on disk per event, and recorder-thread CPU per event in the flushes (us)."""
    config = Config(trace_dir=tmp, flush_interval=3600, schema_version=version,
                    compress=compress, fingerprint=fingerprint)
    rec = recorder(config, lambda rank: build_sink(config, rank))
    attach, extract = transport(rec)
    out, obs = Payload(n, fresh=fingerprint), Observer()
    cpu = 0.0
    for done in range(0, events, 2):
        d = {"next_token_ids": torch.zeros(8, dtype=torch.long), "hidden_states": None}
        attach(d, out)
        extract(d, obs)
        if (done + 2) % per_flush == 0:
            c0 = time.thread_time()
            rec.flush()
            cpu += time.thread_time() - c0
    rec.shutdown(5.0)
    assert rec.exported == events, (rec.exported, events)
    size = sum(p.stat().st_size for p in Path(tmp).iterdir())
    return size / events, cpu / events * 1e6


def bytes_table(tmp: str, events: int, per_flush: int) -> None:
    kinds = ["none", "gzip"] + (["zstd"] if _has_zstd() else [])
    print(f"\nbytes per event on disk ({events} events, a flush every {per_flush}; stats spans "
          f"included), and the recorder thread's flush CPU per event in us:")
    head = "".join(f"{f'v{v} {c}':>17}" for v in (1, 2) for c in kinds)
    print(f"  {'tensors':<12}{head}")
    for n, fp in ((1, False), (3, False), (3, True), (16, False)):
        cells = []
        for version in (1, 2):
            for compress in kinds:
                where = f"{tmp}/bytes-{n}-{fp}-{version}-{compress}"
                size, cpu = bytes_row(where, n, version, compress, fp, events, per_flush)
                cells.append(f"{size:>9.0f} B {cpu:>4.1f}us")
        label = f"{n}{' fp' if fp else ''}"
        print(f"  {label:<12}" + "".join(f"{c:>17}" for c in cells), flush=True)
    if "zstd" not in kinds:
        print("  note: zstd: skipped, the zstandard package is not importable")


def demo_messages(count: int) -> list[Any]:
    """``count`` message events as a demo's stage 0 and last stage record them, in turn: a
    proxy send (hidden states), a receive's begin and end of the output message (sampled ids,
    logprobs, a list, the auxiliary tensors, ``__msg_type__``; fingerprints on), the output's
    send; call times 1 ms apart."""
    from pptrace.model.messages import MessageEvent, MessageOp

    prefix = "__sampling_observer_output__."
    kind = TensorMeta.of_key("__msg_type__", (), "str", "", 0, is_tensor=False)
    proxy = (TensorMeta.of_key("hidden_states", (4, 32), "float32", "cpu", 512,
                           fingerprint="b2:fb0e3c14a14c9061"), kind)
    output = (TensorMeta.of_key("next_token_ids", (4,), "int64", "cpu", 32, fingerprint="b2:b6815"
                            "55f3840bc79"),
              TensorMeta.of_key("next_token_logprobs", (4,), "float32", "cpu", 16,
                            fingerprint="b2:5b2d67eafaa26bba"),
              TensorMeta.of_key("extend_logprob_start_len_per_req", (), "list", "", 0,
                            is_tensor=False),
              *(TensorMeta.of_key(prefix + name, shape, dtype, "cpu", size, fingerprint=fp)
                for name, shape, dtype, size, fp in (
                    ("topk_logprobs", (4, 4), "float32", 64, "b2:43bdc14539b79684"),
                    ("topk_ids", (4, 4), "int64", 128, "b2:558152cb9502a9d7"),
                    ("entropy", (4,), "float32", 16, "b2:c2b8f0a826468c9c"))), kind)
    keys = tuple(t.key for t in output)
    thread, wall, mono = 140_310_644_915_072, 1_796_125_298_889_980_507, 11_039_236_520_768
    out = []
    for i in range(count):
        seq, turn = divmod(i, 4)
        at = dict(seq=seq, wall_ns=wall + i * 1_000_000, mono_ns=mono + i * 1_000_000,
                  thread_id=thread)
        if turn == 0:
            out.append(MessageEvent(MessageOp.SEND, "end", duration_ns=542_238, peer=1,
                                    peer_pp_rank=1, peer_tp_rank=0, kind="proxy",
                                    keys=("hidden_states", "__msg_type__"), tensors=proxy, **at))
        elif turn == 1:
            out.append(MessageEvent(MessageOp.RECV, "begin", peer=3, peer_pp_rank=3,
                                    peer_tp_rank=0, expected_kind="output", **at))
        elif turn == 2:
            out.append(MessageEvent(MessageOp.RECV, "end", duration_ns=22_790_492, peer=3,
                                    peer_pp_rank=3, peer_tp_rank=0, kind="output",
                                    expected_kind="output", keys=keys, tensors=output, **at))
        else:
            out.append(MessageEvent(MessageOp.SEND, "end", duration_ns=611_002, peer=0,
                                    peer_pp_rank=0, peer_tp_rank=0, kind="output",
                                    carries_attach=seq, keys=keys, tensors=output, **at))
    return out


def messages_row(tmp: str, version: int, compress: str, count: int,
                 per_flush: int) -> tuple[float, float]:
    """Bytes on disk per message span (``demo_messages``), flushed every ``per_flush``, and the
    sink's CPU per message in us (encoding and compression: what the recorder thread spends)."""
    config = Config(trace_dir=tmp, flush_interval=3600, schema_version=version,
                    compress=compress)
    sink = build_sink(config, RANK)
    events = demo_messages(count)
    c0 = time.thread_time()
    for i in range(0, count, per_flush):
        sink.export_messages(events[i:i + per_flush], RANK, "bench")
    cpu = time.thread_time() - c0
    sink.shutdown(5.0)
    return sum(p.stat().st_size for p in Path(tmp).iterdir()) / count, cpu / count * 1e6


def messages_table(tmp: str, count: int, per_flush: int) -> None:
    kinds = ["none", "gzip"] + (["zstd"] if _has_zstd() else [])
    print(f"\nbytes per message span on disk ({count} of the demo's messages: proxy send, "
          f"receive begin and end, output send; a flush every {per_flush}), and the sink's CPU "
          "per message in us:")
    print("  " + "".join(f"{f'v{v} {c}':>17}" for v in (1, 2) for c in kinds))
    cells = []
    for v in (1, 2):
        for c in kinds:
            size, cpu = messages_row(f"{tmp}/msg-{v}-{c}", v, c, count, per_flush)
            cells.append(f"{size:>9.0f} B {cpu:>4.1f}us")
    print("  " + "".join(f"{cell:>17}" for cell in cells), flush=True)


def _has_zstd() -> bool:
    import importlib.util

    return importlib.util.find_spec("zstandard") is not None


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def soak_row(tmp: str, rate: int, seconds: float, max_mb: float, segment_mb: float,
             compress: str) -> dict[str, float]:
    """``rate`` events/s for ``seconds`` into a ``max_mb`` budget: disk, memory, accounting."""
    import threading

    from pptrace.load.loader import load_paths

    config = Config(trace_dir=tmp, rotate_mb=segment_mb, max_mb=max_mb, compress=compress)
    rec = recorder(config, lambda rank: build_sink(config, rank)).start()
    probe = recorder(Config(flush_interval=3600), lambda rank: None)
    fill(probe, 2, tensors=3)
    templates = list(probe._buf)
    append, seqs = rec.append, [rec.seq[t[0]] for t in templates]
    disk: list[int] = []
    rss: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            try:
                disk.append(sum(e.stat().st_size for e in os.scandir(tmp)))
            except FileNotFoundError:  # a segment deleted between listing and stat
                continue
            rss.append(_rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    done, start = 0, time.perf_counter()
    while (now := time.perf_counter()) < start + seconds:
        due = int((now - start) * rate / 2)
        if done >= due:
            time.sleep(0.0005)
            continue
        for _ in range(due - done):
            for t, s in zip(templates, seqs, strict=True):
                append((t[0], next(s), time.time_ns(), time.monotonic_ns(), *t[4:]))
        done = due
    elapsed = time.perf_counter() - start
    rec.shutdown(10.0)
    stop.set()
    sampler.join()
    stats = rec.stats()
    (proc,) = load_paths([tmp]).processes
    final = proc.stats
    rotated = final.rotated if final is not None else 0
    tenth = max(1, len(rss) // 10)
    early, late = statistics.median(rss[tenth:2 * tenth]), statistics.median(rss[-tenth:])
    return {
        "offered/s": 2 * done / elapsed,
        "recorded": float(stats.recorded),
        "in the files": float(len(proc.events)),
        "rotated": float(rotated),
        "dropped": float(stats.dropped),
        "unaccounted": float(stats.recorded - len(proc.events) - rotated - stats.dropped),
        "rotated segments": float(final.rotated_segments if final is not None else 0),
        "disk max MB": max(disk) / 1e6,
        "budget+segment MB": max_mb + segment_mb,
        "RSS 2nd tenth MB": early / 1e6,
        "RSS last tenth MB": late / 1e6,
        "RSS change %": (late - early) / early * 100,
        "samples": float(len(disk)),
    }


def files_section(tmp: str, args: argparse.Namespace) -> None:
    bytes_table(tmp, args.bytes_events, args.per_flush)
    messages_table(tmp, args.bytes_events, args.per_flush)
    print(f"\nsustained {args.rate} events/s for {args.seconds:.0f} s (hot-path appends), "
          "stream mode, files, gzip:")
    result = sustained_row(f"{tmp}/sustained-gzip", args.rate, args.seconds, True, "gzip")
    for key, value in result.items():
        print(f"  {key:<22}{value:>12.1f}")
    for compress in ("none", "gzip"):
        print(f"\nsoak: {args.rate} events/s for {args.seconds:.0f} s (3 tensors), budget "
              f"{args.soak_max_mb:g} MB in {args.soak_segment_mb:g} MB segments, {compress}:")
        soak = soak_row(f"{tmp}/soak-{compress}", args.rate, args.seconds, args.soak_max_mb,
                        args.soak_segment_mb, compress)
        for key, value in soak.items():
            print(f"  {key:<22}{value:>12.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("files",), help="only the trace-file figures")
    parser.add_argument("--bytes-events", type=int, default=2000)
    parser.add_argument("--per-flush", type=int, default=50)
    parser.add_argument("--soak-max-mb", type=float, default=8.0)
    parser.add_argument("--soak-segment-mb", type=float, default=1.0)
    args = parser.parse_args()
    if args.only == "files":
        print(f"python {sys.version.split()[0]}, torch {torch.__version__}, "
              f"{os.cpu_count()} CPUs")
        with tempfile.TemporaryDirectory(prefix="pptrace-export-") as tmp:
            files_section(tmp, args)
        return
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, {os.cpu_count()} CPUs; "
          f"events of 4 tensors each")
    rows: dict[str, list[dict[str, float]]] = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pptrace-export-") as tmp:
        for r in range(args.repeats):
            jobs: list[tuple[str, Callable[[], dict[str, float] | None]]] = [
                ("file", lambda r=r: file_row(f"{tmp}/file{r}", args.events)),
                ("otlp grpc", lambda: otlp_row("grpc", args.events)),
                ("otlp http", lambda: otlp_row("http", args.events)),
            ]
            jobs = jobs[r % 3:] + jobs[:r % 3]
            for name, job in jobs:
                result = job()
                if result is None:
                    note = f"{name}: skipped, tests/otlp_receiver.py is not available"
                    if note not in notes:
                        notes.append(note)
                    continue
                rows.setdefault(name, []).append(result)
                print(f"  repeat {r} {name}: {result['events/s']:.0f} events/s", flush=True)
        for note in notes:
            print(f"  note: {note}")
        print(f"\nthroughput ({args.events} events per repeat, medians of {args.repeats}):")
        for name, results in rows.items():
            keys = results[0].keys()
            cells = ", ".join(f"{k} {statistics.median(x[k] for x in results):.1f}"
                              for k in keys)
            print(f"  {name:<10} {cells}   (per-event costs in us of recorder-thread CPU)"
                  if name == "file" else f"  {name:<10} {cells}")
        for raw, how in ((False, "wrapped attach+extract calls"),
                         (True, "hot-path appends of recorded events")):
            print(f"\nsustained {args.rate} events/s for {args.seconds:.0f} s ({how}), stream "
                  f"mode, files, default buffer and exit timeout:")
            result = sustained_row(f"{tmp}/sustained{raw}", args.rate, args.seconds, raw)
            for key, value in result.items():
                print(f"  {key:<22}{value:>12.1f}")
        files_section(tmp, args)


if __name__ == "__main__":
    main()
