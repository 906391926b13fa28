"""pptrace beside SGLang's plugin ``HookRegistry`` (the wheel's own), in any order.

The registry patches attach and extract as pptrace does (the module attribute and every by-name
importer) with ``functools.wraps`` wrappers, which copy whatever attributes pptrace's wrapper
carries. For AROUND, BEFORE and AFTER hooks (and all three at once), pptrace first or the hook
first, on the Python and the C wrapper: the hook runs on every call and pptrace records each call
exactly once; ``uninstrument()`` leaves no pptrace code in the chain and the hook still runs;
instrumenting again records once more, into the new recorder; a real ``os.fork()`` child keeps the
hook and records once into its own recorder.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import pptrace
from pptrace.activation import startup
from pptrace.engines.sglang_load import ATTACH, EXTRACT, MODULE
from pptrace.model.config import Config
from pptrace.record import native
from pptrace.record.wrapper import is_wrapped, unwrap
from tests.doubles import Observer
from tests.helpers_core import NATIVE_CACHE
from tests.helpers_startup import (
    PYTHON,
    REPO,
    child_env,
    real_module,
    sample_output,
    write_consumer,
)

QUIET = Config(exporters=("none",), flush_interval=0.05)
KINDS = ("around", "before", "after", "all")
ORDERS = ("pptrace-first", "hook-first")
HAS_COMPILER = bool(os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++"))
_names = itertools.count()


def hook_registry() -> Any:
    """SGLang's plugin registry from the installed wheel (after its transport module loads)."""
    real_module()
    return importlib.import_module("sglang.srt.plugins.hook_registry")


def register(kind: str, calls: list[str]) -> None:
    """Register ``kind`` hooks (every one appends to ``calls``) on attach and extract."""
    reg = hook_registry()
    for fn in (ATTACH, EXTRACT):
        target = f"{MODULE}.{fn}"
        if kind in ("around", "all"):
            def around(original: Any, *args: Any, _fn: str = fn, **kwargs: Any) -> Any:
                calls.append(f"around {_fn}")
                return original(*args, **kwargs)
            reg.HookRegistry.register(target, around, reg.HookType.AROUND)
        if kind in ("before", "all"):
            def before(*args: Any, _fn: str = fn, **kwargs: Any) -> None:
                calls.append(f"before {_fn}")
            reg.HookRegistry.register(target, before, reg.HookType.BEFORE)
        if kind in ("after", "all"):
            def after(result: Any, *args: Any, _fn: str = fn, **kwargs: Any) -> None:
                calls.append(f"after {_fn}")
            reg.HookRegistry.register(target, after, reg.HookType.AFTER)


def chain(fn: Any) -> list[Any]:
    """Every callable down ``fn``'s wrapper chain (``__wrapped__``; pptrace's own by unwrap)."""
    out = [fn]
    while len(out) < 32:
        fn = unwrap(fn) if is_wrapped(fn) else getattr(fn, "__wrapped__", None)
        if fn is None:
            break
        out.append(fn)
    return out


def roundtrip(consumer: types.ModuleType) -> None:
    tensors = consumer.send({"next_token_ids": torch.tensor([3])}, sample_output())
    assert consumer.receive(tensors, Observer()).named["scores"].shape == (2, 3)
    assert list(tensors) == ["next_token_ids"]


@pytest.fixture(params=["python", "c"])
def wrapper_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The Python wrapper, or the native reader's C wrapper (built once per machine)."""
    if request.param == "c":
        if not HAS_COMPILER:
            pytest.skip("no C++ compiler to build the native reader (as tests/test_native.py)")
        monkeypatch.setenv("PPTRACE_NATIVE_DIR", NATIVE_CACHE)
        native.build()
    native._loaded = None
    yield request.param
    native._loaded = None


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[types.ModuleType, types.ModuleType]]:
    """SGLang's module and a by-name consumer; every binding of the originals put back after."""
    mod = real_module()
    originals = {id(getattr(mod, n)): getattr(mod, n) for n in (ATTACH, EXTRACT)}
    consumer = write_consumer(tmp_path, f"consumer_coexist_{next(_names)}")
    bound = [(m, name, v) for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)
             for name, v in list(vars(m).items()) if originals.get(id(v)) is v]
    reg = hook_registry()
    reg.HookRegistry.reset()
    yield mod, consumer
    pptrace.uninstrument()
    reg.HookRegistry.reset()
    for m, name, v in bound:
        m.__dict__[name] = v


def expected_calls(kind: str) -> list[str]:
    per = {"around": ["around"], "before": ["before"], "after": ["after"],
           "all": ["around", "before", "after"]}[kind]
    return [f"{k} {fn}" for fn in (ATTACH, EXTRACT) for k in per]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_hook_and_pptrace_both_run_once_per_call_in_either_order(
    engine: tuple[types.ModuleType, types.ModuleType], wrapper_kind: str, kind: str, order: str
) -> None:
    mod, consumer = engine
    originals = getattr(mod, ATTACH), getattr(mod, EXTRACT)
    calls: list[str] = []
    register(kind, calls)
    reg = hook_registry()
    if order == "hook-first":
        reg.HookRegistry.apply_hooks()
    rec = pptrace.instrument(QUIET)
    if order == "pptrace-first":
        reg.HookRegistry.apply_hooks()
    assert rec is not None
    site = getattr(consumer, ATTACH)
    assert getattr(mod, ATTACH) is site  # one chain, bound in both places
    own = [f for f in chain(site) if is_wrapped(f)]
    assert len(own) == 1 and chain(site)[-1] is originals[0]
    if wrapper_kind == "c":
        assert type(own[0]).__name__ == "Hot"  # the native reader's C wrapper is in use
    # The hook's wrapper carries what functools.wraps copied, and is still not pptrace's.
    assert is_wrapped(site) is (order == "hook-first")

    for _ in range(3):
        roundtrip(consumer)
    assert sorted(calls) == sorted(expected_calls(kind) * 3)
    assert rec.recorded == 6

    pptrace.uninstrument()
    for fn, original in zip((ATTACH, EXTRACT), originals, strict=True):
        links = chain(getattr(consumer, fn))
        assert not any(is_wrapped(f) for f in links), links  # no pptrace code left
        assert links[-1] is original and getattr(mod, fn) is getattr(consumer, fn)
    calls.clear()
    roundtrip(consumer)
    assert sorted(calls) == sorted(expected_calls(kind))  # the hook still runs
    assert rec.recorded == 6

    again = pptrace.instrument(QUIET)
    assert again is not None and again is not rec
    calls.clear()
    roundtrip(consumer)
    assert sorted(calls) == sorted(expected_calls(kind))  # ... after re-instrumenting too
    assert again.recorded == 2 and rec.recorded == 6
    assert len([f for f in chain(getattr(consumer, ATTACH)) if is_wrapped(f)]) == 1
    pptrace.uninstrument()
    assert not any(is_wrapped(f) for f in chain(getattr(consumer, EXTRACT)))


def test_a_holder_that_cannot_be_spliced_keeps_an_inert_pass_through(
    engine: tuple[types.ModuleType, types.ModuleType],
) -> None:
    mod, consumer = engine
    attach = getattr(mod, ATTACH)
    rec = pptrace.instrument(QUIET)
    assert rec is not None and startup._state is not None
    patch = startup._state.patch
    ours = getattr(mod, ATTACH)
    holder = [ours]  # calls through a list: no closure cell to put the original in
    calls: list[str] = []

    def opaque(tensors: Any, output: Any) -> Any:
        calls.append("opaque")
        return holder[0](tensors, output)

    opaque.__wrapped__ = ours  # type: ignore[attr-defined]
    mod.__dict__[ATTACH] = consumer.__dict__[ATTACH] = opaque
    roundtrip(consumer)
    assert rec.recorded == 2 and calls == ["opaque"]
    pptrace.uninstrument()
    assert patch.inert == 1 and holder[0] is ours  # left in place, said so
    roundtrip(consumer)
    assert calls == ["opaque", "opaque"] and rec.recorded == 2  # passed through, not recorded
    assert len(rec.buffer) == 0 and unwrap(ours) is attach


FORK = """
import importlib, json, os, sys
import torch
import pptrace
from pptrace.activation import startup
from pptrace.engines.sglang_load import ATTACH, EXTRACT, MODULE, load_transport_module
from pptrace.model.config import Config
from pptrace.record.wrapper import is_wrapped, unwrap
from tests.doubles import Observer
from tests.helpers_startup import sample_output

order, kind = sys.argv[1], sys.argv[2]
mod = load_transport_module(allow_bare=True)
reg = importlib.import_module("sglang.srt.plugins.hook_registry")
calls = []
types = {"around": ["AROUND"], "before": ["BEFORE"], "after": ["AFTER"],
         "all": ["AROUND", "BEFORE", "AFTER"]}[kind]
for fn in (ATTACH, EXTRACT):
    for t in types:
        def hook(*args, _t=t, _fn=fn, **kwargs):
            calls.append(_t + " " + _fn)
            return args[0](*args[1:], **kwargs) if _t == "AROUND" else None
        reg.HookRegistry.register(MODULE + "." + fn, hook, getattr(reg.HookType, t))
if order == "hook-first":
    reg.HookRegistry.apply_hooks()
parent = pptrace.instrument(Config(exporters=("none",), flush_interval=60))
if order == "pptrace-first":
    reg.HookRegistry.apply_hooks()


def roundtrip():
    t = getattr(mod, ATTACH)({"next_token_ids": torch.tensor([3])}, sample_output())
    getattr(mod, EXTRACT)({"__sampling_observer_output__.x": torch.ones(1)}, Observer())


def chain(fn):
    out = [fn]
    while len(out) < 32:
        fn = unwrap(fn) if is_wrapped(fn) else getattr(fn, "__wrapped__", None)
        if fn is None:
            break
        out.append(fn)
    return out


roundtrip()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    calls.clear()
    roundtrip()
    roundtrip()
    child = startup.active_recorder()
    own = [sum(1 for f in chain(getattr(mod, n)) if is_wrapped(f)) for n in (ATTACH, EXTRACT)]
    os.write(write, json.dumps({
        "calls": calls, "own": own, "child": child.recorded if child else None,
        "fresh": child is not parent, "parent_buffer": len(parent.buffer),
        "wrapper": type([f for f in chain(getattr(mod, ATTACH)) if is_wrapped(f)][0]).__name__,
    }).encode())
    os._exit(0)
os.close(write)
os.waitpid(pid, 0)
print(os.read(read, 65536).decode())
"""


@pytest.mark.slow
@pytest.mark.parametrize("order", ORDERS)
def test_a_forked_child_keeps_the_hook_and_records_once(
    tmp_path: Path, wrapper_kind: str, order: str
) -> None:
    (tmp_path / "fork.py").write_text(FORK)
    env = child_env(PYTHONPATH=str(REPO), PPTRACE_NATIVE_DIR=(
        NATIVE_CACHE if wrapper_kind == "c" else str(tmp_path / "no-native")))
    proc = subprocess.run([PYTHON, str(tmp_path / "fork.py"), order, "all"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert sorted(got["calls"]) == sorted(
        [f"{t} {fn}" for fn in (ATTACH, EXTRACT) for t in ("AROUND", "BEFORE", "AFTER")] * 2)
    assert got["own"] == [1, 1]  # one pptrace wrapper in each chain: the child's
    assert got["fresh"] and got["child"] == 4  # two round trips, each call recorded once
    assert got["parent_buffer"] == 0  # the parent's recorder takes nothing in the child
    assert got["wrapper"] == ("Hot" if wrapper_kind == "c" else "function")
