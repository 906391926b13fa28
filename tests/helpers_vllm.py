"""Four real gloo processes (PP=2 x TP=2) moving IntermediateTensors-shaped dicts through vLLM
0.33.0's own ``GroupCoordinator``, the way its V1 worker does (``Worker.execute_model``): a
non-last stage ``isend_tensor_dict(output.tensors, all_gather_group=get_tp_group())``, its device
handles waited at the top of the next step; a non-first stage ``irecv_tensor_dict(
all_gather_group=get_tp_group())`` held as ``AsyncIntermediateTensors``, whose ``.tensors`` waits
the handles and runs the postprocess list when the model reads it. Each rank runs under
``pptrace.instrument()`` with no option: vLLM is detected. A scenario injects one bug class:

- ``healthy``: TP-replicated ``hidden_states`` and ``residual``;
- ``overwrite`` (vllm#54962): the sender writes into ``hidden_states`` while its isend is in
  flight, before the receiver posts its receive (ordered by a world barrier, so the race is won
  every time, not by chance);
- ``residual-slices`` (vllm#24021): a ``residual`` that differs across the TP ranks (not
  replicated, as with sequence parallelism) sent as TP slices;
- ``broadcast``: healthy, and each step the last stage broadcasts its sampled token ids to the
  other stage with ``GroupCoordinator.broadcast_tensor_dict`` over the PP group;
- ``lost-send``: the sender skips its last send and stays alive (its process exiting would
  close the connections and fail the receive instead); the receiver waits in
  ``irecv_tensor_dict`` until the test stops it with SIGTERM (pptrace drains its trace then).
"""

from __future__ import annotations

import os
from typing import Any

STEPS = 3
SCENARIOS = ("healthy", "overwrite", "residual-slices", "lost-send", "broadcast")


class LazyTensors:
    """``AsyncIntermediateTensors``' waiting, as vLLM's V1 worker defines it (gpu_worker.py):
    the handles, then the postprocess steps, the first time ``tensors`` is read."""

    def __init__(self, tensors: dict[str, Any], handles: list[Any],
                 postprocess: list[Any]) -> None:
        self._tensors, self._handles, self._post = tensors, handles, postprocess
        self._waited = False

    @property
    def tensors(self) -> dict[str, Any]:
        if not self._waited:
            for handle in self._handles:
                handle.wait()
            for fn in self._post:
                fn()
            self._waited = True
        return self._tensors


def rank_main(rank: int, init_file: str, trace_dir: str, scenario: str,
              finished: Any = None, release: Any = None, instrument: bool = True) -> None:
    """One rank of the pipeline (run by ``multiprocessing`` spawn); ``instrument=False``: traced
    by ``pptrace run``'s start-up alone."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank),
                      PPTRACE_DIR=trace_dir, PPTRACE_RUN_ID=f"vllm-{scenario}",
                      PPTRACE_FLUSH_INTERVAL="0.2")
    import pptrace

    if instrument:
        pptrace.instrument()  # no option: vLLM is the engine, detected
    import torch
    from vllm.distributed import parallel_state as ps

    ps.init_distributed_environment(4, rank, f"file://{init_file}", rank, backend="gloo")
    coordinator = ps.GroupCoordinator
    # vLLM's layout: TP innermost (TP groups [[0,1],[2,3]], PP groups [[0,2],[1,3]]).
    tp = coordinator([[0, 1], [2, 3]], rank, "gloo", True, group_name="tp")
    pp = coordinator([[0, 2], [1, 3]], rank, "gloo", True, group_name="pp")
    ps._TP, ps._PP = tp, pp
    send_work: list[Any] = []
    for step in range(STEPS):
        if pp.is_first_rank:
            for handle in send_work:  # the previous step's sends, waited at the top of this one
                handle.wait()
            residual = torch.full((4, 6), step + 0.5)
            if scenario == "residual-slices":
                residual = residual + tp.rank_in_group  # not TP-replicated
            output = {"hidden_states": torch.full((4, 6), float(step)), "residual": residual}
            send_work = []
            if not (scenario == "lost-send" and step == STEPS - 1):
                handles = ps.get_pp_group().isend_tensor_dict(
                    output, all_gather_group=ps.get_tp_group())
                send_work = handles[1:]
            if scenario == "overwrite":
                output["hidden_states"].add_(100.0)  # the next step's buffer reuse, too early
            torch.distributed.barrier()
        else:
            torch.distributed.barrier()  # the sender has written (or not) before we post
            tensor_dict, handles, postprocess = ps.get_pp_group().irecv_tensor_dict(
                all_gather_group=ps.get_tp_group())
            intermediate = LazyTensors(tensor_dict, handles, postprocess)
            assert intermediate.tensors["hidden_states"].shape == (4, 6)  # the model reads it
        if scenario == "broadcast":
            # The last stage hands its sampled token ids to the other stages (as async
            # scheduling's sampled-token broadcast does), through the coordinator's
            # broadcast_tensor_dict over the PP group.
            last = pp.world_size - 1
            sampled = {"sampled_token_ids": torch.arange(4).reshape(4, 1) + step}
            got = pp.broadcast_tensor_dict(sampled if pp.is_last_rank else None, src=last)
            assert got is not None and got["sampled_token_ids"].tolist()[0] == [step]
    for handle in send_work:
        handle.wait()
    if scenario != "lost-send":  # there, the receivers never come back from their receive
        torch.distributed.barrier()
    if instrument:
        pptrace.uninstrument()  # the trace is written
    if finished is not None and pp.is_first_rank:
        # Alive, and silent: exiting would close gloo's connections and fail the receive.
        finished.put(rank)
        release.wait(120)


def main(argv: list[str]) -> int:
    """``python -m tests.helpers_vllm DIR``: the healthy pipeline, uninstrumented (for
    ``pptrace run``), its four ranks spawned as vLLM's executor spawns its workers."""
    import multiprocessing as mp

    trace_dir = argv[0]
    ctx = mp.get_context("spawn")
    init = os.path.join(os.path.dirname(os.path.abspath(trace_dir)), "init")
    procs = [ctx.Process(target=rank_main,
                         args=(rank, init, trace_dir, "healthy", None, None, False))
             for rank in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    return max(abs(p.exitcode if p.exitcode is not None else 1) for p in procs)


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
