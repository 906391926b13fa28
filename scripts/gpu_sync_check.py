"""Check on a GPU that pptrace's recording never synchronises with the device.

    python scripts/gpu_sync_check.py            # exit 0: no sync; 1: a sync; 2: check not effective

Runs the wrapped attach+extract (SGLang's real module when it loads, else pptrace's reference) on
CUDA tensors under ``torch.cuda.set_sync_debug_mode("error")``, in stream and flight mode with
fingerprinting off (pptrace's default), then shuts the recorder down (its thread converts and
exports while the check is still on); with the Python reads, and again with the native reader
(built first when a C++ compiler is at hand). Without CUDA it prints why and exits 0. The CPU
twin of this check is ``tests/test_nosync.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import torch
from pptrace.activation.sglang_module import load_transport_module

from pptrace.model.config import Config
from pptrace.model.records import Event, RecorderStats
from pptrace.record import native
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport

CALLS = 200


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
        self.named = {f"t{i}": torch.randn(8, 4, device="cuda") for i in range(4)}
        self.named["ids"] = torch.arange(8, device="cuda")

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
    ids = torch.zeros(8, dtype=torch.long, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(CALLS):
            tensors = {"next_token_ids": ids}
            attach(tensors, output)
            extract(tensors, observer)
        rec.request_dump()
        rec.shutdown(timeout=10.0)
    except RuntimeError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        torch.cuda.set_sync_debug_mode(0)
    if rec.internal_errors:
        return f"{rec.internal_errors} internal errors inside pptrace: {dict(rec.warn.counts)}"
    if len(sink.events) != 2 * CALLS or sink.events[0].tensors[0].device != "cuda:0":
        return f"expected {2 * CALLS} events on cuda:0, got {len(sink.events)}"
    return None


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_sync_check: skipped, no CUDA device here (tests/test_nosync.py covers CPU)")
        return 0
    # The check must be able to fail: a device-to-host read has to raise under "error".
    torch.cuda.set_sync_debug_mode("error")
    try:
        torch.ones(1, device="cuda").item()
        effective = False
    except RuntimeError:
        effective = True
    finally:
        torch.cuda.set_sync_debug_mode(0)
    if not effective:
        print("gpu_sync_check: set_sync_debug_mode('error') did not catch .item(); no verdict")
        return 2
    mod = load_transport_module(allow_bare=True)
    if mod is None:
        import pptrace.record.engine as mod
    print(f"gpu_sync_check: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
