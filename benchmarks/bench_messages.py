"""What tracing the PP message layer costs per message, over gloo between 2 real processes.

Rank 0 sends ``--messages`` output-like dicts (token ids, a logprob tensor, three auxiliary
tensors, a list, ``__msg_type__``) to rank 1 through the sample's ``Link``, three ways in one
run: bare; through pptrace's message wrappers (``pptrace.record.messages``, a started recorder
writing the trace file); through a naive wrapper that opens an OpenTelemetry SDK span per call
with the same metadata as attributes (spans batched to nowhere). It prints µs per message on
each side and what tracing adds over bare.

``--in-process`` measures the wrappers alone, on one thread, around an in-memory wire (a deque:
no gloo, no pickling), which is what the caller's thread pays: bare; pptrace with its recorder's
thread writing the trace file meanwhile; pptrace with no recorder thread (the caller's share
only); the naive span-per-call wrapper. Each figure is the best of ``--repeat`` rounds.

    python benchmarks/bench_messages.py --messages 2000
    python benchmarks/bench_messages.py --in-process --messages 20000
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist

MODES = ("bare", "pptrace", "naive-span")


def payload(i: int) -> dict[str, Any]:
    from pptrace.model.records import PREFIX

    return {"next_token_ids": torch.arange(8), "next_token_logprobs": torch.zeros(8),
            PREFIX + "topk_logprobs": torch.zeros(8, 5), PREFIX + "topk_ids": torch.zeros(8, 5),
            PREFIX + "entropy": torch.zeros(8), "lens": [0] * 8, "__msg_type__": "output"}


def naive(fn: Any, name: str) -> Any:
    """A span per call, metadata as attributes: the obvious way to trace the layer."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Nowhere(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Nowhere()))
    tracer = provider.get_tracer("naive")

    def wrapped(*args: Any) -> Any:
        with tracer.start_as_current_span(name) as span:
            result = fn(*args)
            d = args[0] if isinstance(args[0], dict) else result
            if isinstance(d, dict):
                span.set_attribute("keys", [str(k) for k in d])
                ts = [(k, v) for k, v in d.items() if isinstance(v, torch.Tensor)]
                span.set_attribute("shapes", [",".join(map(str, v.shape)) for _, v in ts])
                span.set_attribute("dtypes", [str(v.dtype) for _, v in ts])
                span.set_attribute("nbytes", [v.numel() * v.element_size() for _, v in ts])
            return result

    return wrapped


def rank_main(rank: int, store: str, n: int, out: str, q: Any) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pptrace_samples.transport import Link

    from pptrace.export.sinks import build_sink
    from pptrace.model.config import Config
    from pptrace.model.records import RankInfo
    from pptrace.record.messages import MessageLog, wrap_recv, wrap_send
    from pptrace.record.recorder import Recorder

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    times = {}
    for mode in MODES:
        link = Link()
        send, recv = link.send_tensor_dict, link.recv_tensor_dict
        rec = None
        if mode == "pptrace":
            cfg = Config(trace_dir=out, run_id="bench")
            info = RankInfo(rank=rank, world_size=2, pp_rank=rank, pp_size=2, host="h",
                            pid=os.getpid())
            rec = Recorder(cfg, sink_factory=lambda r, cfg=cfg: build_sink(cfg, r),
                           rank_provider=lambda info=info: (info, True)).start()
            log = MessageLog(rec)
            send = wrap_send(send, log, lambda a, k: (int(a[-1]), int(a[-1]), 1),
                             dict_name="tensors")
            recv = wrap_recv(recv, log, lambda a, k: (int(a[-1]), int(a[-1]), 1))
        elif mode == "naive-span":
            send, recv = naive(send, "send"), naive(recv, "recv")
        dicts = [payload(i) for i in range(n)]
        dist.barrier()
        t0 = time.perf_counter()
        for d in dicts:
            if rank == 0:
                send(d, 1)
            else:
                recv(0)
        link.drain()
        times[mode] = (time.perf_counter() - t0) / n * 1e6
        dist.barrier()
        if rec is not None:
            rec.shutdown()
    q.put((rank, times))
    dist.destroy_process_group()


class MemoryLink:
    """The sample ``Link``'s signatures around a deque: what the wrappers cost, alone."""

    def __init__(self) -> None:
        import collections

        self.wire: collections.deque[dict[str, Any]] = collections.deque()

    def send_tensor_dict(self, tensors: dict[str, Any], dst: int) -> None:
        self.wire.append(tensors)

    def recv_tensor_dict(self, src: int) -> dict[str, Any]:
        return self.wire.popleft()


IN_PROCESS = ("bare", "pptrace", "pptrace-caller", "naive-span")


def in_process(n: int, repeat: int) -> dict[str, tuple[float, float]]:
    """(send µs, recv µs) per message for each of ``IN_PROCESS``, best of ``repeat`` rounds."""
    from pptrace.export.sinks import build_sink
    from pptrace.model.config import Config
    from pptrace.model.records import RankInfo
    from pptrace.record.messages import MessageLog, wrap_recv, wrap_send
    from pptrace.record.recorder import Recorder

    torch.set_num_threads(1)
    dicts = [payload(i) for i in range(n)]
    best = {mode: (float("inf"), float("inf")) for mode in IN_PROCESS}
    info = RankInfo(rank=0, world_size=2, pp_rank=0, pp_size=2, host="h", pid=os.getpid())
    for _ in range(repeat):
        for mode in IN_PROCESS:
            link = MemoryLink()
            send, recv = link.send_tensor_dict, link.recv_tensor_dict
            rec = None
            with tempfile.TemporaryDirectory() as out:
                if mode.startswith("pptrace"):
                    cfg = Config(trace_dir=out, run_id="bench", buffer_size=4 * n)
                    rec = Recorder(cfg, sink_factory=lambda r, cfg=cfg: build_sink(cfg, r),
                                   rank_provider=lambda: (info, True))
                    if mode == "pptrace":
                        rec.start()
                    log = MessageLog(rec)
                    send = wrap_send(send, log, lambda a, k: (1, 1, 1), dict_name="tensors")
                    recv = wrap_recv(recv, log, lambda a, k: (1, 1, 1))
                elif mode == "naive-span":
                    send, recv = naive(send, "send"), naive(recv, "recv")
                t0 = time.perf_counter()
                for d in dicts:
                    send(d, 1)
                t1 = time.perf_counter()
                for _d in dicts:
                    recv(0)
                t2 = time.perf_counter()
                if rec is not None:
                    rec.shutdown()
            got = ((t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6)
            best[mode] = (min(best[mode][0], got[0]), min(best[mode][1], got[1]))
    return best


def print_in_process(n: int, repeat: int) -> None:
    t = in_process(n, repeat)
    print(f"{n} messages in one process (an in-memory wire), best of {repeat}; µs per message")
    print(f"{'side':8} " + " ".join(f"{m:>14}" for m in IN_PROCESS))
    for i, side in enumerate(("send", "recv")):
        print(f"{side:8} " + " ".join(f"{t[m][i]:14.2f}" for m in IN_PROCESS))
    print(f"{'added':8} " + " ".join(
        f"{t[m][0] + t[m][1] - t['bare'][0] - t['bare'][1]:14.2f}" for m in IN_PROCESS)
        + "  (send + recv, over bare)")
    print(json.dumps(t))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--in-process", action="store_true",
                        help="the wrappers alone around an in-memory wire, on one thread")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (--in-process)")
    args = parser.parse_args()
    if args.in_process:
        print_in_process(args.messages, args.repeat)
        return
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=rank_main, args=(r, store, args.messages, tmp, q))
                 for r in (0, 1)]
        for p in procs:
            p.start()
        results = dict(q.get(timeout=600) for _ in procs)
        for p in procs:
            p.join()
    print(f"{args.messages} messages, 2 processes over gloo; µs per message")
    print(f"{'side':8} " + " ".join(f"{m:>11}" for m in MODES) + "  added: pptrace  naive-span")
    for rank, side in ((0, "send"), (1, "recv")):
        t = results[rank]
        print(f"{side:8} " + " ".join(f"{t[m]:11.1f}" for m in MODES)
              + f"  {t['pptrace'] - t['bare']:14.1f} {t['naive-span'] - t['bare']:11.1f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
