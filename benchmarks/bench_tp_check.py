"""Benchmark: the one TP check alone, on both layers, against a baseline checkout's two checks.

Builds in memory one stage of ``--tp`` TP ranks with ``--transfers`` transfers each, every one
fingerprinted (so no two tensors tuples are equal, the interning's worst case) and TP-replicated
(each rank's tuple is its own object with equal values, as a loader builds them):

- attaches: the last stage's auxiliary output (two tensors), judged for ``tp-disagree``;
- sends: an output-like message (a TP-sliced ``hidden_states`` and ``residual``, whole token
  ids), judged for ``message-slices-differ``.

One transfer in 1000 differs on the last TP rank, so each check has findings to word. It times
this checkout's ``analyze.tp.tp_disagree`` and ``analyze.slices.tp_slices``; with ``--baseline
DIR`` (an older checkout: ``git archive <commit> | tar -x -C DIR``) also that checkout's
``analyze/tp.py`` and ``analyze/slices.py`` on the same objects, the two alternating, and prints
the best of ``--repeat`` rounds of each with the findings each raised.

    python benchmarks/bench_tp_check.py --transfers 200000
    python benchmarks/bench_tp_check.py --transfers 200000 --baseline /tmp/base --repeat 5
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from types import ModuleType
from typing import Any

from pptrace.analyze import slices, tp
from pptrace.analyze.message_sides import Side
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, TensorMeta
from pptrace.model.trace import ProcessTrace


def _rank(pp: int, tp_rank: int, tp_size: int) -> RankInfo:
    return RankInfo(rank=pp * tp_size + tp_rank, world_size=2 * tp_size, pp_rank=pp, pp_size=2,
                    tp_rank=tp_rank, tp_size=tp_size, host="bench", pid=100 + tp_rank)


def build(n: int, tp_size: int) -> tuple[list[tuple[int, RankInfo, list[Event]]], list[Side]]:
    """Per TP rank of the last stage: its attaches, and its sends as a message ``Side``."""
    attaches, sides = [], []
    for r in range(tp_size):
        rank = _rank(1, r, tp_size)
        evs, sends = [], []
        for i in range(n):
            fp = f"{i:016x}" if r < tp_size - 1 or i % 1000 != 7 else "changed"
            b = 1 + i % 16
            aux = (TensorMeta("entropy", PREFIX + "entropy", (b,), "float32", f"cuda:{r}", b * 4,
                              fingerprint="e" + fp),
                   TensorMeta("topk_ids", PREFIX + "topk_ids", (b, 5), "int64", f"cuda:{r}",
                              b * 40, fingerprint="t" + fp))
            evs.append(Event(Direction.ATTACH, i, rank, i, i, 1, tensors=aux))
            T = TensorMeta.of_key
            sent = (T("hidden_states", (b * 4, 4096), "bfloat16", "cuda", b * 32768, sliced=True,
                      fingerprint="h" + fp),
                    T("residual", (b * 4, 4096), "bfloat16", "cuda", b * 32768, sliced=True,
                      fingerprint="r" + fp[:-1]),
                    T("next_token_ids", (b,), "int64", "cuda", b * 8, fingerprint="i" + fp))
            sends.append(MessageEvent(MessageOp.SEND, "end", i, wall_ns=i, mono_ns=i,
                                      peer=r, kind="output", tensors=sent))
        attaches.append((r, rank, evs))
        proc = ProcessTrace(rank=rank, events=())
        sides.append(Side(r, proc, "run", "", sends=sends))
    return attaches, sides


def _load(directory: str, name: str) -> ModuleType:
    path = os.path.join(directory, "pptrace", "analyze", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"baseline_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _timed(fn: Any) -> tuple[float, int]:
    count = [0]

    def add(*_: Any, **__: Any) -> int:
        count[0] += 1
        return count[0] - 1

    t0 = time.process_time()  # CPU seconds: on a shared machine, fairer than the wall clock
    fn(add)
    return time.process_time() - t0, count[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transfers", type=int, default=100_000, help="per TP rank")
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", help="an older checkout's folder")
    args = parser.parse_args()
    attaches, sides = build(args.transfers, args.tp)
    runs: dict[str, Any] = {
        "attach (tp-disagree)": lambda add: tp.tp_disagree(
            [tp.TpRank(i, r, "run", evs) for i, r, evs in attaches], add),
        "send (message-slices-differ)": lambda add: slices.tp_slices(sides, add),
    }
    base: dict[str, Any] = {}
    if args.baseline:
        old_tp, old_slices = _load(args.baseline, "tp"), _load(args.baseline, "slices")

        def old_attach(add: Any) -> None:
            lasts = [old_tp.LastRank(i, r, "run", evs) for i, r, evs in attaches]
            for ref, b, other, ev in old_tp.stage_disagreements(lasts):
                add(old_tp.tp_message(ref.rank, b, other.rank, ev))

        base = {"attach (tp-disagree)": old_attach,
                "send (message-slices-differ)": lambda add: old_slices.tp_slices(sides, add)}
    print(f"{args.tp} TP ranks x {args.transfers} transfers; best of {args.repeat}")
    print(f"{'check':<30} {'cpu s':>8} {'found':>6} {'baseline s':>11} {'found':>6}")
    for name, fn in runs.items():
        best: dict[str, tuple[float, int]] = {}
        for _ in range(args.repeat):
            for label, f in (("new", fn), ("old", base.get(name))):
                if f is not None:
                    s, found = _timed(f)
                    best[label] = min(best.get(label, (s, found)), (s, found))
        old = best.get("old")
        tail = f"{old[0]:>11.3f} {old[1]:>6}" if old else ""
        print(f"{name:<30} {best['new'][0]:>8.3f} {best['new'][1]:>6} {tail}")


if __name__ == "__main__":
    main()
