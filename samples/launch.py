"""Start the sample pipeline's rank processes, follow their progress, and bound their lifetime.

Ranks are started from a fork server that has already imported torch and the pipeline (one
import for all ranks instead of one each; spawn where fork servers do not exist). The launcher
itself never imports torch. When a rank fails, the others notice through gloo and stop on their
own; any rank still alive ``grace`` seconds later, or at the overall ``timeout``, is terminated.

    result = run_pipeline(PipelineOptions(ranks=4, steps=32, out_dir="traces/demo"))
    result.exit_codes     # (0, 0, 0, 0)
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_mod
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .options import EXIT_CRASH, PipelineOptions, RankReport, Terminated

__all__ = ["RunResult", "run_pipeline"]

PRELOAD = ["pptrace_samples.preload"]


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended: one exit code per rank (negative: killed by that signal)."""

    options: PipelineOptions
    exit_codes: tuple[int, ...]
    reports: dict[int, RankReport] = field(default_factory=dict)
    elapsed: float = 0.0
    killed: tuple[int, ...] = ()  # ranks the launcher had to terminate

    @property
    def ok(self) -> bool:
        """Every rank exited 0."""
        return all(code == 0 for code in self.exit_codes)


def _context() -> Any:
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


def _child(opts: PipelineOptions, rank: int, messages: Any) -> None:
    """A rank process: run the rank, report, exit with its status (no interpreter teardown)."""
    code = EXIT_CRASH

    def terminate(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: let the trace flush in peace
        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)
    try:
        from .pipeline import run_rank

        def progress(r: int, steps: int) -> None:
            messages.put(("step", r, steps))

        report = run_rank(opts, rank, progress)
        code = report.exit_code
        messages.put(("done", rank, report))
        messages.close()
        messages.join_thread()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip torch.distributed's and gloo's teardown: a peer may be gone already.
        os._exit(code)


def run_pipeline(
    opts: PipelineOptions,
    on_progress: Callable[[dict[int, int]], None] | None = None,
    timeout: float = 180.0,
    grace: float | None = None,
) -> RunResult:
    """Run every rank of ``opts`` to its end and return how each one exited."""
    opts = opts.resolved()
    os.makedirs(opts.out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="pptrace-sample-")
    opts = replace(
        opts,
        store_path=os.path.join(tmp, "store"),
        run_id=opts.run_id or uuid.uuid4().hex[:16],
    )
    grace = opts.comm_timeout + 5.0 if grace is None else grace
    ctx = _context()
    messages = ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(opts, rank, messages), name=f"pptrace-sample-rank{rank}")
        for rank in range(opts.ranks)
    ]
    steps = {rank: 0 for rank in range(opts.ranks)}
    reports: dict[int, RankReport] = {}
    killed: list[int] = []
    start = time.monotonic()

    def take(block: bool) -> bool:
        try:
            kind, rank, payload = messages.get(timeout=0.1) if block else messages.get_nowait()
        except queue_mod.Empty:
            return False
        if kind == "step":
            steps[rank] = payload
            if on_progress is not None:
                on_progress(dict(steps))
        else:
            reports[rank] = payload
        return True

    try:
        for proc in procs:
            proc.start()
        abort_at: float | None = None
        while any(p.is_alive() for p in procs):
            take(block=True)
            now = time.monotonic()
            if abort_at is None and any(p.exitcode not in (None, 0) for p in procs):
                abort_at = now + grace
            if now - start > timeout or (abort_at is not None and now > abort_at):
                for rank, proc in enumerate(procs):
                    if proc.is_alive():
                        killed.append(rank)
                        proc.terminate()
                break
        for proc in procs:
            proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        while take(block=False):
            pass
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
        messages.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return RunResult(
        options=opts,
        exit_codes=tuple(p.exitcode if p.exitcode is not None else -9 for p in procs),
        reports=reports,
        elapsed=time.monotonic() - start,
        killed=tuple(killed),
    )
