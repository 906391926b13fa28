"""vLLM 0.33.0's V1 model runner's sampled-token broadcast, on two real gloo processes (PP=2).

Under async scheduling with PP, the last stage's ``GPUModelRunner.sample_tokens`` calls
``_pp_broadcast_prev_sampled_token_ids(sampled_token_ids)`` (a ``torch.distributed.broadcast``
over the PP group's device group), and every other stage's calls
``_pp_receive_prev_sampled_token_ids_to_input_batch()``, which posts the receive with
``async_op=True`` into a fresh ``input_batch.prev_sampled_token_ids`` and keeps the work in
``_pp_recv_work``; the next step's ``_prepare_input_ids`` waits it before reading the tokens.

What is real and what is not:

- real: the three methods' code (``_pp_broadcast_prev_sampled_token_ids``,
  ``_pp_receive_prev_sampled_token_ids_to_input_batch``, ``_is_all_reqs_chunked_prefill``),
  compiled from the installed wheel's ``vllm/v1/worker/gpu_model_runner.py`` itself (its file
  name and line numbers kept), with the module's own globals for what they use: ``torch``,
  ``numpy`` and vLLM's real ``get_pp_group``, whose ``GroupCoordinator``s run on gloo; the
  broadcasts are ``torch.distributed``'s, on real processes;
- not real: the class that carries them (a class named ``GPUModelRunner`` in a module object
  registered as ``vllm.v1.worker.gpu_model_runner``), because importing the real module needs
  vLLM's GPU-side dependency chain (PIL, pybase64, cachetools, msgspec, cloudpickle, uvloop,
  py-cpuinfo, prometheus_client, xgrammar, whose compiled apache-tvm-ffi has no build here);
  the runner's state the methods read (``input_batch``, ``discard_request_mask``, ``requests``,
  ``device``), plain stand-ins; and the wait, which is ``_prepare_input_ids``' first three
  lines re-typed (``STEP_WAIT``), since the rest of that method fills GPU input buffers.

pptrace finds the class the way it finds the real one: ``pptrace.instrument()`` (no option)
sees the module loaded and patches the class by its name. A scenario:

- ``healthy``: three steps, the second one all non-final prefill chunks on both stages (both
  methods skip the broadcast, as vLLM does);
- ``lost``: at the last step the source's batch is all non-final prefill chunks while the
  member's is not (the stages disagree on the discard mask): the source skips its broadcast,
  the member posts its receive and waits for good, until the test stops it with SIGTERM;
- ``dtype``: the source hands float32 sampled ids, the member allocates int32 as the method
  does: the same bytes, so gloo moves them and the member reads them as other numbers, silently.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any

STEPS = 3
NUM_REQS = 4
RUNNER = "vllm.v1.worker.gpu_model_runner"
METHODS = ("_pp_broadcast_prev_sampled_token_ids",
           "_pp_receive_prev_sampled_token_ids_to_input_batch", "_is_all_reqs_chunked_prefill")


def runner_module() -> types.ModuleType:
    """A module registered as vLLM's runner module, whose ``GPUModelRunner`` carries the wheel's
    own methods (compiled from its file: see the module doc)."""
    import numpy as np
    import torch
    from vllm.distributed.parallel_state import get_pp_group

    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None
    path = Path(spec.origin).parent / "v1" / "worker" / "gpu_model_runner.py"
    tree = ast.parse(path.read_text(), str(path))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GPUModelRunner")
    defs = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in METHODS]
    assert sorted(d.name for d in defs) == sorted(METHODS), "the wheel's runner changed"
    assert all(not d.decorator_list for d in defs)
    module = types.ModuleType(RUNNER)
    module.__file__ = str(path)
    module.__dict__.update(torch=torch, np=np, get_pp_group=get_pp_group)
    exec(compile(ast.Module(body=list(defs), type_ignores=[]), str(path), "exec"),
         module.__dict__)
    methods = {name: module.__dict__.pop(name) for name in METHODS}
    module.GPUModelRunner = type("GPUModelRunner", (), {**methods, "__module__": RUNNER})
    sys.modules[RUNNER] = module
    return module


def make_runner(cls: type, chunked: bool) -> Any:
    """A runner with the state the three methods read (``chunked``: every request is a
    non-final prefill chunk, so the runner skips the broadcast)."""
    import numpy as np
    import torch

    runner = object.__new__(cls)
    runner.device = torch.device("cpu")
    runner.requests = {}
    runner._pp_recv_work = None
    runner.discard_request_mask = types.SimpleNamespace(np=np.full(NUM_REQS, chunked))
    runner.input_batch = types.SimpleNamespace(
        num_reqs=NUM_REQS, req_ids=[f"r{i}" for i in range(NUM_REQS)],
        num_tokens_no_spec=np.zeros(NUM_REQS, dtype=np.int64),
        is_token_ids=np.zeros((NUM_REQS, 8), dtype=bool), prev_sampled_token_ids=None,
        prev_req_id_to_index=None)
    return runner


def step_wait(runner: Any) -> None:
    """``GPUModelRunner._prepare_input_ids``' first three lines (vLLM 0.33.0), re-typed."""
    if runner._pp_recv_work is not None:
        runner._pp_recv_work.wait()
        runner._pp_recv_work = None


def rank_main(rank: int, init_file: str, trace_dir: str, scenario: str,
              finished: Any = None, release: Any = None) -> None:
    """One stage (run by ``multiprocessing`` spawn): rank 1 is the last stage, the source."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                      PPTRACE_DIR=trace_dir, PPTRACE_RUN_ID=f"vllm-runner-{scenario}",
                      PPTRACE_FLUSH_INTERVAL="0.2")
    import torch
    from vllm.distributed import parallel_state as ps

    cls = runner_module().GPUModelRunner
    import pptrace

    pptrace.instrument()  # no option: vLLM is the engine; the runner module is loaded
    ps.init_distributed_environment(2, rank, f"file://{init_file}", rank, backend="gloo")
    coordinator = ps.GroupCoordinator
    ps._TP = coordinator([[0], [1]], rank, "gloo", True, group_name="tp")
    ps._PP = coordinator([[0, 1]], rank, "gloo", True, group_name="pp")
    last = ps.get_pp_group().is_last_rank
    got = []
    for step in range(STEPS):
        chunked = step == 1 or (scenario == "lost" and last and step == STEPS - 1)
        runner = make_runner(cls, chunked)
        if last:
            sampled = torch.arange(NUM_REQS, dtype=torch.int32).reshape(NUM_REQS, 1) + step
            if scenario == "dtype":
                sampled = sampled.float()
            runner._pp_broadcast_prev_sampled_token_ids(sampled)
        else:
            runner._pp_receive_prev_sampled_token_ids_to_input_batch()
            step_wait(runner)  # the next step's input preparation
            got.append(runner.input_batch.prev_sampled_token_ids.flatten().tolist())
        if not (scenario == "lost" and step == STEPS - 1):  # there, the member never returns
            torch.distributed.barrier()
    if not last and scenario != "dtype":  # what arrived is what was sent (step 1 skipped)
        assert got[0] == list(range(NUM_REQS)) and got[2] == [s + 2 for s in range(NUM_REQS)]
    pptrace.uninstrument()  # the trace is written
    if finished is not None and last:
        finished.put(rank)  # alive and silent: exiting would fail the member's receive
        release.wait(120)
