"""Shared pieces for the startup, OTLP and Jaeger tests: the real SGLang module, a consumer module
that imports attach and extract by name (as SGLang's scheduler does), tiny user objects, and a
child-process runner.

    mod = real_module()
    consumer = write_consumer(tmp_path, "consumer_a")   # imported, bound by name
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from pptrace.engines.sglang_load import ATTACH, EXTRACT, MODULE, load_transport_module
from tests.doubles import Output

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

CONSUMER = f"""
from {MODULE} import {ATTACH}, {EXTRACT}


def send(tensors, output):
    {ATTACH}(tensors, output)
    return tensors


def receive(tensors, observer):
    return {EXTRACT}(tensors, observer)
"""

# What a child script does to import SGLang's module without its GPU dependencies: register a
# bare 'sglang' package (no pptrace code involved; see shared/domain.md section 5).
BARE_SGLANG = """
import importlib.util, sys, types
_spec = importlib.util.find_spec("sglang")
_bare = types.ModuleType("sglang")
_bare.__path__ = list(_spec.submodule_search_locations)
sys.modules["sglang"] = _bare
"""


#: The start of a child script that drives the transport under pptrace: the module (SGLang's, or
#: pptrace's bare copy), ``out_dir`` from argv, and ``attach(n)``: n attaches of one tensor.
CHILD_PRELUDE = """
import glob, json, os, signal, sys, threading, time
import torch
import pptrace
from pptrace.engines.sglang_load import load_transport_module
from pptrace.model.config import Config

mod = load_transport_module(allow_bare=True)
out_dir = sys.argv[1]


class Out:
    def to_pp_tensors(self):
        return {"a": torch.ones(1)}


def attach(n):
    for _ in range(n):
        mod.add_auxiliary_output_to_pp_tensors({}, Out())
"""


def real_module() -> types.ModuleType:
    """SGLang's own transport module, loaded from the installed wheel."""
    mod = load_transport_module(allow_bare=True)
    assert mod is not None, "SGLang's wheel must be installed (pip install --no-deps sglang)"
    return mod


def write_consumer(tmp_path: Path, name: str) -> types.ModuleType:
    """Write and import a module that binds attach/extract by name."""
    (tmp_path / f"{name}.py").write_text(CONSUMER)
    if str(tmp_path) not in sys.path:
        sys.path.insert(0, str(tmp_path))
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def sample_output() -> Output:
    return Output({"scores": torch.arange(6, dtype=torch.float32).reshape(2, 3),
                   "ids": torch.tensor([1, 2], dtype=torch.int64)})


def child_env(**extra: str) -> dict[str, str]:
    """A child's environment: this one, minus pptrace/OTel settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PPTRACE_", "OTEL_")) and k != "PYTHONPATH"}
    env.update(extra)
    return env


def run_pptrace(args: list[str], env: Mapping[str, str], cwd: Path,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``pptrace run ARGS`` in a child process (``--native-build off`` unless ARGS say:
    a background build would change which wrapper later tests' processes get)."""
    if not any(a.startswith("--native-build") for a in args):
        args = ["--native-build", "off", *args]
    return subprocess.run([PYTHON, "-m", "pptrace.cli.run", *args], env=dict(env),
                          cwd=str(cwd), capture_output=True, text=True, timeout=timeout)


def spawn_world(rank_main: Callable[[int, str, str, str], None], world: int, tmp_path: Path,
                scenario: str) -> tuple[Path, list[dict[str, Any]]]:
    """Run ``rank_main(rank, store, out, scenario)`` in ``world`` spawned processes (each writes
    ``seen<rank>.json`` into ``out``); return the trace folder and what each rank saw."""
    import json
    import multiprocessing as mp

    out = tmp_path / "traces"
    out.mkdir()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=rank_main, args=(r, str(tmp_path / "store"), str(out), scenario))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * world
    seen = [json.loads((out / f"seen{r}.json").read_text()) for r in range(world)]
    for r in range(world):
        (out / f"seen{r}.json").unlink()
    return out, seen


def sglang_world_rank(rank: int, store: str, world: int, out: str, run_id: str,
                      **layout: int) -> tuple[Any, Any]:
    """In a spawned rank: SGLang's real ``parallel_state`` on a gloo world of ``world``
    (4 s timeout), and a recorder (not started) writing ``out`` with ``layout`` (pp/tp fields
    of ``RankInfo``). Returns ``(parallel_state, recorder)``."""
    import datetime

    import torch.distributed as dist

    from pptrace.export.sinks import build_sink
    from pptrace.model.config import Config
    from pptrace.model.records import RankInfo
    from pptrace.record.recorder import Recorder
    from tests.test_sglang_messages import load_parallel_state

    ps = load_parallel_state()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=4))
    info = RankInfo(rank=rank, world_size=world, host="h", pid=os.getpid(), **layout)
    cfg = Config(trace_dir=out, run_id=run_id, flush_interval=0.2)
    return ps, Recorder(cfg, sink_factory=lambda r: build_sink(cfg, r),
                        rank_provider=lambda: (info, True))


def sglang_world_group(ps: Any, rank: int, world: int, **attrs: Any) -> Any:
    """SGLang's real ``GroupCoordinator`` over the whole gloo world, built without its
    constructor (which wants devices): ``attrs`` set the rest (``pynccl_comm``, ...)."""
    import torch.distributed as dist

    group = object.__new__(ps.GroupCoordinator)
    group.rank_in_group, group.world_size, group.ranks = rank, world, list(range(world))
    group.rank = rank
    group.device_group = group.cpu_group = dist.group.WORLD
    for name, value in attrs.items():
        setattr(group, name, value)
    return group
