"""Check on a GPU that pptrace's recording never synchronises with the device.

    python scripts/gpu_sync_check.py            # exit 0: no sync; 1: a sync; 2: check not effective

Runs the wrapped attach+extract (SGLang's real module when it loads, else pptrace's reference) on
CUDA tensors under ``torch.cuda.set_sync_debug_mode("error")``, in stream and flight mode with
fingerprinting off (pptrace's default), then shuts the recorder down (its thread converts and
exports while the check is still on); with the Python reads, and again with the native reader
(built first when a C++ compiler is at hand). Then the message layer: a send and a receive of a
dict of CUDA tensors through pptrace's message wrappers, written to a trace file and read back.
Without CUDA it prints why and exits 0. The CPU twin of this check is ``tests/test_nosync.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from pptrace.engines.sglang_load import load_transport_module
from pptrace.model.config import Config
from pptrace.model.records import Event, RecorderStats
from pptrace.record import native
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport

CALLS = 200
#: Where the checked tensors live: "cuda"; ``--cpu`` runs the same checks' code on the CPU (no
#: sync can be caught there: it tests this script, as tests/test_nosync.py does).
DEVICE = "cuda"
#: What a tensor's device reads back as.
DEVICE_NAME = "cuda:0"


@contextmanager
def syncs_raise() -> Iterator[None]:
    """While inside, a device synchronisation raises (on CUDA; nothing to catch on the CPU)."""
    if DEVICE != "cuda":
        yield
        return
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)


class ListSink:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def export(self, events: Sequence[Event]) -> None:
        self.events.extend(events)

    def export_stats(self, stats: RecorderStats) -> None:
        pass

    def shutdown(self, timeout: float) -> None:
        pass


class Output:
    def __init__(self) -> None:
        self.named = {f"t{i}": torch.randn(8, 4, device=DEVICE) for i in range(4)}
        self.named["ids"] = torch.arange(8, device=DEVICE)

    def to_pp_tensors(self) -> dict[str, torch.Tensor]:
        return self.named


class Observer:
    def from_pp_tensors(self, tensors: Any) -> Any:
        return dict(tensors)


def check(mode: str, mod: Any, use_native: bool) -> str | None:
    """Run the calls in ``mode``; return what synchronised, or None."""
    sink = ListSink()
    rec = Recorder(Config(mode=mode, fingerprint=False, flush_interval=0.05, native=use_native),
                   sink_factory=lambda _rank: sink).start()
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    output, observer = Output(), Observer()
    ids = torch.zeros(8, dtype=torch.long, device=DEVICE)
    try:
        with syncs_raise():
            for _ in range(CALLS):
                tensors = {"next_token_ids": ids}
                attach(tensors, output)
                extract(tensors, observer)
            rec.request_dump()
            rec.shutdown(timeout=10.0)
    except RuntimeError as exc:
        return f"{type(exc).__name__}: {exc}"
    if rec.internal_errors:
        return f"{rec.internal_errors} internal errors inside pptrace: {dict(rec.warn.counts)}"
    if len(sink.events) != 2 * CALLS or sink.events[0].tensors[0].device != DEVICE_NAME:
        return f"expected {2 * CALLS} events on {DEVICE_NAME}, got {len(sink.events)}"
    return None


def check_messages() -> str | None:
    """A send and a receive of CUDA tensor dicts through the message wrappers, written to a
    trace file while the check is on (in a temporary folder, removed after); return what
    synchronised, or None."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pptrace-gpu-") as folder:
        return _messages_in(folder)


def _messages_in(folder: str) -> str | None:
    import os

    from pptrace.export.sinks import build_sink
    from pptrace.load.loader import load_paths
    from pptrace.model.records import RankInfo
    from pptrace.record.messages import MessageLog, wrap_recv, wrap_send

    cfg = Config(trace_dir=folder, run_id="gpu", flush_interval=0.05, fingerprint=False)
    rank = RankInfo(rank=1, world_size=2, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1)
    rec = Recorder(cfg, sink_factory=lambda r: build_sink(cfg, r),
                   rank_provider=lambda: (rank, True)).start()
    log = MessageLog(rec)
    hidden = {"hidden_states": torch.randn(8, 64, device=DEVICE),
              "residual": torch.randn(8, 64, device=DEVICE), "lens": [8]}

    def peer(args: Any, kwargs: Any) -> tuple[int, int | None, int]:
        return 0, 0, 0

    send = wrap_send(lambda d, dst: None, log, peer)
    recv = wrap_recv(lambda src: hidden, log, peer)
    try:
        with syncs_raise():
            for _ in range(CALLS):
                send(hidden, 0)
                recv(0)
            rec.shutdown(timeout=10.0)
    except RuntimeError as exc:
        return f"{type(exc).__name__}: {exc}"
    if rec.internal_errors:
        return f"{rec.internal_errors} internal errors inside pptrace: {dict(rec.warn.counts)}"
    trace = load_paths([os.path.join(folder, f) for f in os.listdir(folder)])
    got = [m for p in trace.processes for m in p.messages if m.phase == "end"]
    devices = {t.device for m in got for t in m.tensors if t.is_tensor}
    if len(got) != 2 * CALLS or devices != {DEVICE_NAME}:
        return (f"expected {2 * CALLS} sends and receives on {DEVICE_NAME}, "
                f"got {len(got)} on {sorted(devices)}")
    return None


def main(argv: Sequence[str]) -> int:
    global DEVICE, DEVICE_NAME
    if "--cpu" in argv:
        DEVICE, DEVICE_NAME = "cpu", "cpu"
    elif not torch.cuda.is_available():
        print("gpu_sync_check: skipped, no CUDA device here (tests/test_nosync.py covers CPU)")
        return 0
    # The check must be able to fail: a device-to-host read has to raise under "error".
    effective = False
    try:
        with syncs_raise():
            torch.ones(1, device=DEVICE).item()
    except RuntimeError:
        effective = True
    if not effective and DEVICE == "cuda":
        print("gpu_sync_check: set_sync_debug_mode('error') did not catch .item(); no verdict")
        return 2
    mod = load_transport_module(allow_bare=True)
    if mod is None:
        import pptrace.record.engine as mod
    where = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU (the script's own test)"
    print(f"gpu_sync_check: {where}, torch {torch.__version__}, "
          f"transport {mod.__name__}, {CALLS} attach+extract pairs of 5 tensors per mode")
    paths = ["python"]
    try:  # the native reader too, built here when a compiler is at hand (about 20 s)
        native.build()
    except Exception as exc:
        print(f"  native reader: cannot build ({exc}); Python reads only")
    if native.reader() is not None:
        paths.append("native")
    else:
        print(f"  native reader: {native.status().reason}; Python reads only")
    failed = False
    for path in paths:
        for mode in ("stream", "flight"):
            problem = check(mode, mod, use_native=path == "native")
            print(f"  {path:<7}{mode:<7} "
                  f"{'SYNC: ' + problem if problem else 'no device synchronisation'}")
            failed = failed or problem is not None
    problem = check_messages()
    print(f"  messages send+recv "
          f"{'SYNC: ' + problem if problem else 'no device synchronisation'}")
    return 1 if failed or problem is not None else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
