"""Load and analyze a long run's trace: N message records and M attach/extract events, P ranks.

The trace is written by the real trace-file encoder (``pptrace.export.file_sink.FileSink``, schema
version 2): each rank's file holds its attach/extract events (``sink.export``) and its message
layer (``sink.export_messages``): stage ``s`` receives proxy messages from ``s - 1`` and sends to
``s + 1``, the last stage sends the output message (token ids, logprobs, auxiliary tensors) to
stage 0, and every receive is two records (its begin and its end), as a real run writes them.
Then it loads (``load_paths``) and analyzes (``analyze``) in a fresh process, and prints seconds
for each and the peak RSS (this process and the loader worker, as if both peaked at once), and
the CPU seconds of each (this process and its loader workers: on a shared machine, where wall
time says more about the neighbours, the fairer comparison).

``--fingerprints`` gives every value a content fingerprint of its own (as a run traced with
``PPTRACE_FINGERPRINT`` writes them: each message's differ). ``--baseline DIR`` measures the
same files a second time with the ``pptrace`` package found in DIR (a copy of main:
``git archive main | tar -x -C DIR``), printed beside this checkout's; ``--repeat N`` measures
N rounds, the two alternating (on a shared machine one round says little).

    python benchmarks/bench_scale.py --messages 20000 100000
    python benchmarks/bench_scale.py --messages 1000000 --events 300000 --procs 16
    python benchmarks/bench_scale.py --messages 200000 --fingerprints --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

TP = 4
_START = 1_700_000_000_000_000_000  # the run's wall clock at its first record
FLUSH_NS = 500_000_000  # the recorder's flush interval
BATCH = (1, 4, 8, 16)  # batch sizes cycle, so shapes vary like a real run's


def _rank(index: int, procs: int) -> Any:
    from pptrace.model.records import RankInfo

    pp_size = max(1, procs // TP)
    tp = TP if procs >= TP else procs
    return RankInfo(rank=index, world_size=procs, pp_rank=index // tp, pp_size=pp_size,
                    tp_rank=index % tp, tp_size=tp, host="bench-host", pid=50000 + index)


def _fingerprinted(ts: tuple[Any, ...], tag: int) -> tuple[Any, ...]:
    """``ts``, each with a fingerprint of its own (``tag``: which call; a tensor's content
    differs from one call to the next)."""
    return tuple(t._replace(fingerprint=f"b2:{tag:012x}{i:04x}") if t.is_tensor else t
                 for i, t in enumerate(ts))


def _tensors(kind: str, batch: int) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    from pptrace.model.records import PREFIX, TensorMeta

    T = TensorMeta.of_key
    if kind == "proxy":
        ts = (T("hidden_states", (batch, 4096), "bfloat16", "cuda", batch * 8192),
              T("residual", (batch, 4096), "bfloat16", "cuda", batch * 8192))
        return ("hidden_states", "residual", "__msg_type__"), ts
    ts = (T("next_token_ids", (batch,), "int64", "cuda", batch * 8),
          T("next_token_logprobs", (batch,), "float32", "cuda", batch * 4),
          T(PREFIX + "topk_logprobs", (batch, 5), "float32", "cuda", batch * 20),
          T(PREFIX + "topk_ids", (batch, 5), "int64", "cuda", batch * 40),
          T(PREFIX + "entropy", (batch,), "float32", "cuda", batch * 4))
    return tuple(t.key for t in ts) + ("__msg_type__",), ts


#: The pipeline's clock: step ``s`` begins at ``_BEGIN + s * _period(last)`` on every rank (one
#: host, one clock), and stage ``p``'s part of it at ``p * HOP`` into the step.
_BEGIN, HOP = 1_000_000, 100_000


def _period(last: int) -> int:
    """A step's length: the proxies down the stages, the output back, and room to spare."""
    return max(1_000_000, (last + 2) * HOP)


def _messages(index: int, procs: int, count: int, fingerprints: bool = False) -> list[Any]:
    """About ``count`` message records of rank ``index``: sends and two-record receives, one
    microbatch a step, timed as a real pipeline's are (a send begins before its receive ends:
    the clocks' pass finds them consistent, as on one host it must)."""
    from pptrace.model.messages import MessageEvent, MessageOp

    r = _rank(index, procs)
    tp, last = r.tp_size or 1, (r.pp_size or 1) - 1
    pp = r.pp_rank or 0
    out: list[Any] = []
    if last == 0:  # one stage: no message layer
        return out
    seq = {MessageOp.SEND: 0, MessageOp.RECV: 0}
    me = r.tp_rank or 0
    step = 0
    while len(out) < count:
        batch = BATCH[step % len(BATCH)]
        base = _BEGIN + step * _period(last)
        # (op, peer, kind, start, duration): stage 0 sends the proxy, then waits for the output
        # the last stage sends once the proxy has come down every stage.
        calls: list[tuple[MessageOp, int, str, int, int]] = []
        if pp == 0:
            calls.append((MessageOp.SEND, tp + me, "proxy", base + 50_000, 12_000 + step % 31))
            calls.append((MessageOp.RECV, last * tp + me, "output", base + 100_000,
                          (last + 1) * HOP - 50_000 + step % 97))
        else:
            calls.append((MessageOp.RECV, (pp - 1) * tp + me, "proxy",
                          base + (pp - 1) * HOP + 20_000, HOP - 10_000 + step % 97))
            calls.append((MessageOp.SEND, (pp + 1) * tp + me if pp < last else me,
                          "proxy" if pp < last else "output", base + pp * HOP + 50_000,
                          12_000 + step % 31))
        for op, peer, kind, start, duration in calls:
            keys, ts = _tensors(kind, batch)
            if fingerprints:  # the send's and its receive's agree: one message, one content
                tag = (min(index, peer) * 7919 + seq[op]) * 4 + (kind == "output")
                ts = _fingerprinted(ts, tag)
            common = dict(seq=seq[op], wall_ns=_START + start, mono_ns=start,
                          thread_id=7, peer=peer, peer_pp_rank=peer // tp,
                          peer_tp_rank=peer % tp, kind=kind, keys=keys, tensors=ts)
            if op is MessageOp.RECV:
                out.append(MessageEvent(op=op, phase="begin", duration_ns=-1, **common))
                out.append(MessageEvent(op=op, phase="end", duration_ns=duration, **common))
            else:
                out.append(MessageEvent(op=op, phase="end", duration_ns=duration, **common))
            seq[op] += 1
        step += 1
    return out


def _events(index: int, procs: int, count: int, fingerprints: bool = False) -> list[Any]:
    """``count`` events of rank ``index``: the last stage attaches (just before it sends the
    output message), stage 0 extracts (once it has received it), the other stages neither."""
    from pptrace.model.records import PREFIX, Direction, Event, TensorMeta

    r = _rank(index, procs)
    last = (r.pp_size or 1) - 1
    if r.pp_rank not in (0, last):
        return []
    direction = Direction.ATTACH if r.pp_rank == last else Direction.EXTRACT
    at = last * HOP + 40_000 if direction is Direction.ATTACH else (last + 1) * HOP + 60_000
    out: list[Any] = []
    for i in range(count):
        batch = BATCH[i % len(BATCH)]
        metas = (TensorMeta("entropy", PREFIX + "entropy", (batch,), "float32", "cuda:0",
                            batch * 4),
                 TensorMeta("topk_ids", PREFIX + "topk_ids", (batch, 5), "int64", "cuda:0",
                            batch * 40))
        if fingerprints:  # an attach's and its extract's agree (one microbatch, one content)
            metas = _fingerprinted(metas, i)  # (every TP rank attaches the same tensors)
        keys = ("next_token_ids", "next_token_logprobs")
        after = keys + tuple(m.key for m in metas)
        t = _BEGIN + i * _period(last) + at
        out.append(Event(
            rank=r, direction=direction, seq=i, start_ns=_START + t,
            mono_ns=t, duration_ns=3_000 + i % 13, thread_id=7,
            thread_name="MainThread", subject_type="GenerationBatchResult", tensors=metas,
            keys_before=keys if direction is Direction.ATTACH else after,
            keys_after=after if direction is Direction.ATTACH else keys, run_id="bench-run"))
    return out


def generate(directory: str, messages: int, events: int, procs: int,
             fingerprints: bool = False) -> None:
    """Write ``procs`` v2 trace files through the real encoder."""
    from pptrace.export.file_sink import FileSink
    from pptrace.export.spans import process_resource
    from pptrace.model.records import RecorderStats

    for index in range(procs):
        r = _rank(index, procs)
        path = os.path.join(directory, f"pptrace-rank{index}-pid{r.pid}.otlp.jsonl")
        sink = FileSink(path, process_resource(r, "bench-run", 2))
        ends = 2 * min(TP, procs) if procs > TP else procs  # the ranks of stage 0 and the last
        evs = _events(index, procs, events // ends, fingerprints)
        msgs = _messages(index, procs, messages // procs, fingerprints)
        # As the recorder writes: flush by flush (every FLUSH_NS of the run), its messages,
        # then its events, then a stats span taken after the flush took its records.
        e = m = 0
        flush = _START + FLUSH_NS
        while e < len(evs) or m < len(msgs):
            e0, m0 = e, m
            while e < len(evs) and evs[e].start_ns < flush:
                e += 1
            while m < len(msgs) and msgs[m].wall_ns < flush:
                m += 1
            for i in range(m0, m, 512):
                sink.export_messages(msgs[i:min(m, i + 512)], r, "bench-run")
            for i in range(e0, e, 512):
                sink.export(evs[i:min(e, i + 512)])
            if (e < len(evs) or m < len(msgs)) and (e > e0 or m > m0):
                sink.export_stats(RecorderStats(
                    rank=r, time_ns=flush, recorded=e, exported=e, run_id="bench-run",
                    messages_recorded=m, messages_exported=m))
            flush += FLUSH_NS
        sink.export_stats(RecorderStats(
            rank=r, time_ns=1_800_000_000_000_000_000, recorded=len(evs), exported=len(evs),
            run_id="bench-run", final=True, messages_recorded=len(msgs),
            messages_exported=len(msgs)))  # the recorder's last word, as at a clean exit
        sink.shutdown(5.0)


def measure(directory: str) -> dict[str, float]:
    """Load, then analyze, in this process: seconds each and the peak RSS."""
    from pptrace.analyze.analyzer import analyze
    from pptrace.load.loader import load_paths

    def cpu() -> float:  # this process's and its reaped loader workers' CPU seconds
        own, workers = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                         resource.RUSAGE_CHILDREN))
        return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime

    c0, t0 = cpu(), time.perf_counter()
    trace = load_paths([directory])
    c1, t1 = cpu(), time.perf_counter()
    findings = analyze(trace)
    c2, t2 = cpu(), time.perf_counter()
    peak_kb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
               + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return {"messages": sum(len(p.messages) for p in trace.processes),
            "events": trace.event_count, "load_s": t1 - t0, "analyze_s": t2 - t1,
            "load_cpu_s": c1 - c0, "analyze_cpu_s": c2 - c1,
            "peak_mb": peak_kb / 1024, "findings": len(findings),
            "kinds": sorted({f.kind.value for f in findings}),
            "problems": len(trace.problems)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--events", type=int, default=0,
                        help="attach/extract events (default: messages / 7, a demo's ratio)")
    parser.add_argument("--procs", type=int, default=16)
    parser.add_argument("--dir", help="keep the generated traces here (reused when present)")
    parser.add_argument("--fingerprints", action="store_true",
                        help="every value carries a content fingerprint of its own")
    parser.add_argument("--baseline", help="also measure with the pptrace package in this "
                        "folder (a copy of main), printed beside this checkout's")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds, this checkout and the baseline alternating in each")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    base = args.dir or tempfile.mkdtemp(prefix="pptrace-scale-")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  (uptime)")
    print(f"{'code':>8} {'messages':>9} {'events':>8} {'procs':>5} {'MB':>6} {'load s':>7} "
          f"{'analyze s':>9} {'total s':>7} {'peak MB':>8} {'µs/rec':>7} {'cpu load':>8} "
          f"{'cpu anlz':>8}")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    codes = [("this", here)] + ([("baseline", os.path.abspath(args.baseline))]
                                if args.baseline else [])
    for n in args.messages:
        m = args.events or n // 7
        fp = "-fp" if args.fingerprints else ""
        d = os.path.join(base, f"m{n}-e{m}-p{args.procs}{fp}")
        if not os.path.isdir(d):
            os.makedirs(d + ".tmp", exist_ok=True)
            generate(d + ".tmp", n, m, args.procs, args.fingerprints)
            os.rename(d + ".tmp", d)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) / 1e6
        for label, root in [c for _ in range(args.repeat) for c in codes]:
            env = {**os.environ, "PYTHONPATH": root}
            out = subprocess.run([sys.executable, __file__, "--measure", d], check=True,
                                 capture_output=True, text=True, env=env, cwd=root).stdout
            r = json.loads(out.splitlines()[-1])
            total = r["load_s"] + r["analyze_s"]
            per = total / max(1, r["messages"] + r["events"]) * 1e6
            print(f"{label:>8} {r['messages']:>9} {r['events']:>8} {args.procs:>5} {size:>6.0f} "
                  f"{r['load_s']:>7.2f} {r['analyze_s']:>9.2f} {total:>7.2f} "
                  f"{r['peak_mb']:>8.0f} {per:>7.1f} {r['load_cpu_s']:>8.2f} "
                  f"{r['analyze_cpu_s']:>8.2f}  findings={r['findings']} "
                  f"problems={r['problems']} {','.join(r.get('kinds', []))}", flush=True)


if __name__ == "__main__":
    main()
