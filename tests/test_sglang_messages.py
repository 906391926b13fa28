"""SGLang 0.5.23's own message layer, traced: the wheel's methods run for real, bare and wrapped.

``GroupCoordinator.send_tensor_dict``/``recv_tensor_dict`` (``parallel_state``) and the mixin's
``_pp_recv_typed_dict`` run from the installed wheel, with the modules they import from stubbed
from their own import lists (as ``test_sglang_scheduler`` does for the mixin) and torch real.
Two real processes over gloo: rank 0 sends with the wheel's ``send_tensor_dict`` (its
``send_object`` and ``torch.distributed`` sends), rank 1 receives with the wheel's
``recv_tensor_dict`` inside the wheel's typed receive (a stash per kind), first bare, then
through pptrace's wrappers. The coordinator is the wheel's class, built without its
``__init__`` (which builds NCCL and device communicators): the attributes the two methods read
are set, its process groups are gloo's world group. The all-gather group is a stand-in of two
TP ranks whose ``all_gather`` repeats this rank's slice (two processes cannot also form a TP
pair): the sender slices as the wheel does and the receiver re-assembles, the same for both
runs. Both runs must give the same return objects, dicts, stash and exceptions, and the wrapped
run the events that say what happened. In-process: activation patches the wheel's classes,
through the import hook or when already loaded, the gate patches a mixin that was still
executing, and ``uninstrument`` gives back the exact originals.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import datetime
import importlib
import json
import multiprocessing as mp
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from pptrace.model.records import PREFIX
from tests.test_sglang_scheduler import MIXIN, sglang_folder, stub_modules

PARALLEL_STATE = "sglang.srt.distributed.parallel_state"


# --- the wheel, stubbed ------------------------------------------------------------------------

class _Stub:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


def _stub_value(name: str) -> Any:
    if name.startswith("register_"):  # decorator factories applied at import time
        return lambda *a, **k: (lambda fn: fn)
    if name.startswith("is_"):  # platform probes called at import time
        return lambda *a, **k: False
    return type(name, (_Stub,), {})


def load_parallel_state() -> types.ModuleType:
    """The wheel's ``parallel_state``, its package ``__init__``s skipped and its ``sglang``
    imports stubbed from its own import list (torch real)."""
    root = sglang_folder()
    for name, path in (("sglang", root), ("sglang.srt", root / "srt"),
                       ("sglang.srt.distributed", root / "srt" / "distributed")):
        if name not in sys.modules:
            bare = types.ModuleType(name)
            bare.__path__ = [str(path)]
            sys.modules[name] = bare
    source = (root / "srt" / "distributed" / "parallel_state.py").read_text()
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.ImportFrom) and node.module
                and node.module.startswith("sglang.")):
            continue
        mod = sys.modules.setdefault(node.module, types.ModuleType(node.module))
        for alias in node.names:
            if not hasattr(mod, alias.name):
                setattr(mod, alias.name, _stub_value(alias.name))
    return importlib.import_module(PARALLEL_STATE)


def import_mixin() -> types.ModuleType:
    """The wheel's mixin with its other imports stubbed (``test_sglang_scheduler``'s stubs,
    merged into modules ``load_parallel_state`` stubbed already; its transport import real)."""
    for name, stub in stub_modules().items():
        mod = sys.modules.setdefault(name, stub)
        for attr, value in vars(stub).items():
            if not attr.startswith("__") and not hasattr(mod, attr):
                setattr(mod, attr, value)
    return importlib.import_module(MIXIN)


@contextlib.contextmanager
def isolated_sglang() -> Iterator[None]:
    """``sglang.*`` in ``sys.modules`` as it was before, afterwards (other tests stub it too)."""
    saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
    for name in saved:
        del sys.modules[name]
    try:
        yield
    finally:
        for name in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def coordinator(ps: types.ModuleType, rank: int, world_size: int = 2) -> Any:
    """The wheel's ``GroupCoordinator`` with what its send/receive read (no ``__init__``)."""
    import torch.distributed as dist

    group = object.__new__(ps.GroupCoordinator)
    group.rank_in_group, group.world_size, group.ranks = rank, world_size, [0, 1][:world_size]
    group.rank = rank
    group.device_group = group.cpu_group = dist.group.WORLD if world_size > 1 else None
    return group


class Gather:
    """Two TP ranks' all-gather group, this rank's slice repeated (see the module doc)."""

    world_size, rank_in_group = 2, 0

    def all_gather(self, tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
        return torch.cat([tensor, tensor], dim=dim)


def scheduler(mixin: types.ModuleType, pp_group: Any) -> Any:
    """A scheduler with what the typed receive reads: a subclass of the wheel's mixin."""
    sched = type("Scheduler", (mixin.SchedulerPPMixin,), {})()
    sched.pp_group = pp_group
    sched.pp_comm_stream_ctx = contextlib.nullcontext()
    sched._pp_tensor_dict_inbox = collections.defaultdict(collections.deque)
    sched._pp_record_comm_event = lambda: None
    return sched


def messages(step: int) -> list[dict[str, Any]]:
    """What the last stage sends in one step: a proxy, then two outputs (aux keys in one)."""
    return [
        {"hidden_states": torch.full((4, 2), float(step)), "__msg_type__": "proxy"},
        {"next_token_ids": torch.arange(4) + step, "logprobs": torch.zeros(3),
         PREFIX + "entropy": torch.ones(4) * step, "lens": [1, 2],
         "__msg_type__": "output"},
        {"next_token_ids": torch.arange(2), "empty": torch.zeros(0), "__msg_type__": "output"},
    ]


def describe(value: Any) -> Any:
    """A JSON-able, exact picture of what a call returned (tensors by dtype, shape, values)."""
    if isinstance(value, torch.Tensor):
        return ["tensor", str(value.dtype), list(value.shape), value.tolist()]
    if isinstance(value, dict):
        return ["dict", [[k, describe(v)] for k, v in value.items()]]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [describe(v) for v in value]]
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    return ["object", type(value).__qualname__]


def raised(call: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        call(*args, **kwargs)
    except Exception as exc:
        return ["raised", type(exc).__qualname__, str(exc)]
    return ["returned"]


def rank_main(rank: int, store: str, out: str) -> None:
    """One process: the bare run, then the wrapped run; writes what it saw as JSON."""
    import torch.distributed as dist

    from pptrace.engines.sglang import ENGINE as sglang
    from pptrace.model.config import Config
    from pptrace.model.records import RankInfo
    from pptrace.record.message_patch import patch_class
    from pptrace.record.messages import MessageLog, iter_events
    from pptrace.record.recorder import Recorder

    ps = load_parallel_state()
    mixin = import_mixin()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    info = RankInfo(rank=rank, world_size=2, pp_rank=rank, pp_size=2, tp_rank=0, tp_size=1,
                    host="h", pid=os.getpid())
    seen: dict[str, Any] = {}
    for run in ("bare", "wrapped"):
        if run == "wrapped":
            log = MessageLog(Recorder(Config(), rank_provider=lambda: (info, True)))
            undo = [patch_class(ps.GroupCoordinator, log, sglang),
                    patch_class(mixin.SchedulerPPMixin, log, sglang)]
        group = coordinator(ps, rank)
        got: list[Any] = []
        dist.barrier()
        if rank == 0:
            for step in range(2):
                for d in messages(step):
                    before = describe(d)
                    works = group.send_tensor_dict(d, all_gather_group=Gather(),
                                                   async_send=step == 1)
                    for w in works:
                        w.work.wait()
                    got.append([describe([type(w).__qualname__ for w in works]),
                                describe(d) == before])
            got.append(raised(group.send_tensor_dict, "no dict"))
            got.append(raised(group.send_tensor_dict, {}, dst=5))
        else:
            sched = scheduler(mixin, group)
            for _ in range(2):
                for kind in ("output", "proxy", "output"):  # the proxy waits in the stash
                    got.append(describe(sched._pp_recv_typed_dict(kind, Gather())))
            got.append(describe({k: list(v) for k, v in sched._pp_tensor_dict_inbox.items()}))
            got.append(raised(group.recv_tensor_dict, src=5))
            alone = scheduler(mixin, coordinator(ps, 0, world_size=1))
            got.append(raised(alone._pp_recv_typed_dict, "output"))
        one = coordinator(ps, 0, world_size=1)
        d = {"x": torch.zeros(1)}
        got.append([one.send_tensor_dict(d) is d, one.recv_tensor_dict() is None])
        dist.barrier()
        seen[run] = got
        if run == "wrapped":
            for u in reversed(undo):
                u()
            seen["events"] = [
                {"op": e.op.value, "phase": e.phase, "seq": e.seq, "peer": e.peer,
                 "peer_pp": e.peer_pp_rank, "kind": e.kind, "expected": e.expected_kind,
                 "stashed": e.stashed, "from_stash": e.from_stash, "gather": e.gather_size,
                 "carries": e.carries_attach, "keys": list(e.keys), "error": e.error_type,
                 "tensors": [t.describe() for t in e.tensors]}
                for e in iter_events(log, info)]
            seen["internal_errors"] = log.rec.internal_errors
    dist.destroy_process_group()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(seen, f)


@pytest.mark.slow
def test_the_wheels_send_recv_and_typed_receive_bare_and_wrapped_over_gloo(
        tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=rank_main, args=(r, str(tmp_path / "store"), str(tmp_path)))
             for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0, f"rank process exited with {p.exitcode}"
    sender, receiver = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    for side in (sender, receiver):
        assert side["bare"] == side["wrapped"]  # same returns, dicts, stash and exceptions
        assert side["internal_errors"] == 0
    # What the bare run itself showed (so that the equality above compares something).
    assert sender["bare"][0] == [["list", []], True]  # a blocking send: no works
    # isend: the metadata's size and bytes, then the proxy's hidden_states (as a TP slice).
    assert sender["bare"][3][0] == ["list", ["P2PWork"] * 3]
    assert sender["bare"][6] == ["raised", "AssertionError", "Expecting a dictionary, got "
                                 "<class 'str'>"]
    assert sender["bare"][7] == ["raised", "AssertionError", "Invalid dst rank (5)"]
    first_output = receiver["bare"][0][1][0]  # (dict, event): the dict
    assert [k for k, _ in first_output[1]] == ["next_token_ids", "logprobs",
                                               PREFIX + "entropy", "lens", "__msg_type__"]
    assert receiver["bare"][1][1][0][1][-1] == ["__msg_type__", "proxy"]  # from the stash
    assert receiver["bare"][6] == ["dict", [["proxy", ["list", []]]]]  # the stash, emptied
    assert receiver["bare"][7] == ["raised", "AssertionError", "Invalid src rank (5)"]
    assert receiver["bare"][8] == ["raised", "AttributeError",
                                   "'NoneType' object has no attribute 'get'"]
    assert sender["bare"][-1] == receiver["bare"][-1] == [True, True]  # a group of one

    sends = sender["events"]
    assert [(e["op"], e["kind"], e["peer"], e["peer_pp"], e["gather"]) for e in sends[:3]] == [
        ("send", "proxy", 1, 1, 2), ("send", "output", 1, 1, 2), ("send", "output", 1, 1, 2)]
    assert [e["carries"] for e in sends[:6]] == [None, 0, None, None, 1, None]
    assert sends[1]["tensors"] == ["int64[4]/tp", "float32[3]", "float32[4]/tp",
                                   "non-tensor list", "non-tensor str"]
    assert sends[2]["tensors"][1] == "float32[0]"  # empty: never sliced
    assert [e["error"] for e in sends[6:]] == ["AssertionError", "AssertionError"]
    assert len(sends) == 8  # the group of one recorded nothing
    recvs = receiver["events"]
    # Step 0: output expected, a proxy arrived (stashed), then the output; the proxy from the
    # stash (no wire); the next output from the wire.
    assert [(e["phase"], e["kind"], e["expected"], e["stashed"], e["from_stash"])
            for e in recvs[:7]] == [
        ("begin", "", "output", False, False), ("end", "proxy", "output", True, False),
        ("begin", "", "output", False, False), ("end", "output", "output", False, False),
        ("end", "proxy", "proxy", False, True),
        ("begin", "", "output", False, False), ("end", "output", "output", False, False)]
    assert recvs[1]["tensors"] == ["float32[4, 2]/tp", "non-tensor str"]
    assert recvs[1]["peer"] == 0 and recvs[1]["peer_pp"] == 0
    assert recvs[-2]["phase"] == "begin" and recvs[-1]["error"] == "AssertionError"


# --- activation, in this process ----------------------------------------------------------------

@pytest.fixture()
def wheel() -> Iterator[None]:
    with isolated_sglang():
        yield


def _activate(tmp_path: Path) -> Any:
    import pptrace

    return pptrace.instrument(trace_dir=str(tmp_path), exporters=("none",), run_id="m")


def test_activation_patches_on_import_and_restores_exactly(wheel: None, tmp_path: Path) -> None:
    import pptrace
    from pptrace.activation import startup

    assert PARALLEL_STATE not in sys.modules
    rec = _activate(tmp_path)
    try:
        ps = load_parallel_state()  # through the import hook
        mixin = import_mixin()
        names = ("send_tensor_dict", "recv_tensor_dict")
        gates = {n: ps.GroupCoordinator.__dict__[n] for n in names}
        patch = startup._state.messages[0]  # type: ignore[union-attr]
        assert patch.patched.get("GroupCoordinator") is ps.GroupCoordinator
        # a complete class: patched at once
        assert patch.patched.get("SchedulerPPMixin") is mixin.SchedulerPPMixin
        typed = mixin.SchedulerPPMixin.__dict__["_pp_recv_typed_dict"]
        one = coordinator(ps, 0, world_size=1)
        d = {"x": torch.zeros(1)}
        assert one.send_tensor_dict(d) is d  # the gate's first call: the wrappers take over
        for name in names:
            assert ps.GroupCoordinator.__dict__[name] is gates[name].__wrapped__
        assert rec is not None and rec.messages is not None and rec.messages.recorded == 0
    finally:
        pptrace.uninstrument()
    for name in names:  # the wheel's own functions: gate -> wrapper -> original
        assert ps.GroupCoordinator.__dict__[name] is gates[name].__wrapped__.__wrapped__
        assert ps.GroupCoordinator.__dict__[name].__module__ == PARALLEL_STATE
    assert mixin.SchedulerPPMixin.__dict__["_pp_recv_typed_dict"] is typed.__wrapped__
    assert startup._state is None


def test_a_mixin_still_executing_is_patched_at_the_first_call(wheel: None,
                                                              tmp_path: Path) -> None:
    import pptrace
    from pptrace.activation import startup

    ps = load_parallel_state()
    original_send = ps.GroupCoordinator.__dict__["send_tensor_dict"]
    real = import_mixin()
    typed = real.SchedulerPPMixin.__dict__["_pp_recv_typed_dict"]
    half = types.ModuleType(MIXIN)  # as under pptrace run: the class is not defined yet
    sys.modules[MIXIN] = half
    try:
        _activate(tmp_path)
        patch = startup._state.messages[0]  # type: ignore[union-attr]
        assert patch.patched.get("GroupCoordinator") is ps.GroupCoordinator
        assert patch.patched.get("SchedulerPPMixin") is None
        half.SchedulerPPMixin = real.SchedulerPPMixin  # the module finished executing
        coordinator(ps, 0, world_size=1).recv_tensor_dict()  # the first call opens the gate
        assert patch.patched.get("SchedulerPPMixin") is real.SchedulerPPMixin
        assert real.SchedulerPPMixin.__dict__["_pp_recv_typed_dict"] is not typed
    finally:
        pptrace.uninstrument()
    assert ps.GroupCoordinator.__dict__["send_tensor_dict"] is original_send
    assert real.SchedulerPPMixin.__dict__["_pp_recv_typed_dict"] is typed


def test_pptrace_messages_0_patches_nothing(wheel: None, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import pptrace
    from pptrace.activation import startup

    ps = load_parallel_state()
    original = ps.GroupCoordinator.__dict__["send_tensor_dict"]
    monkeypatch.setenv("PPTRACE_MESSAGES", "0")
    try:
        _activate(tmp_path)
        assert startup._state is not None and not startup._state.messages
        assert ps.GroupCoordinator.__dict__["send_tensor_dict"] is original
    finally:
        pptrace.uninstrument()
