"""Patching SGLang's real module: every by-name binding wrapped once, every one restored."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import pptrace
from pptrace.activation.patch import EnginePatch, module_status
from pptrace.activation.startup import active_recorder
from pptrace.engines.sglang_load import ATTACH, EXTRACT, MODULE
from pptrace.model.config import Config
from pptrace.record.wrapper import is_wrapped, unwrap
from tests.doubles import NotPP, Observer, Output
from tests.helpers_startup import real_module, sample_output, write_consumer

QUIET = Config(exporters=("none",), flush_interval=0.05)


@pytest.fixture
def engine() -> Iterator[Any]:
    mod = real_module()
    originals = getattr(mod, ATTACH), getattr(mod, EXTRACT)
    assert not is_wrapped(originals[0]) and not is_wrapped(originals[1])
    yield mod
    pptrace.uninstrument()
    assert (getattr(mod, ATTACH), getattr(mod, EXTRACT)) == originals


def test_a_consumer_bound_by_name_is_patched_and_restored(engine: Any, tmp_path: Path) -> None:
    consumer = write_consumer(tmp_path, "consumer_before")
    attach, extract = getattr(engine, ATTACH), getattr(engine, EXTRACT)

    rec = pptrace.instrument(QUIET)
    assert rec is not None and active_recorder() is rec
    for holder in (engine, consumer):
        assert is_wrapped(getattr(holder, ATTACH)) and unwrap(getattr(holder, ATTACH)) is attach
        assert is_wrapped(getattr(holder, EXTRACT)) and unwrap(getattr(holder, EXTRACT)) is extract
    assert getattr(consumer, ATTACH) is getattr(engine, ATTACH)  # one wrapper, bound twice

    tensors = consumer.send({"next_token_ids": torch.tensor([3])}, sample_output())
    assert consumer.receive(tensors, Observer()).named["scores"].shape == (2, 3)
    assert rec.recorded == 2

    pptrace.uninstrument()
    assert getattr(consumer, ATTACH) is attach and getattr(consumer, EXTRACT) is extract
    assert getattr(engine, ATTACH) is attach and getattr(engine, EXTRACT) is extract
    assert active_recorder() is None


def test_instrument_uninstrument_repeated_never_double_wraps(engine: Any, tmp_path: Path) -> None:
    consumer = write_consumer(tmp_path, "consumer_repeat")
    attach = getattr(engine, ATTACH)
    for _ in range(3):
        first = pptrace.instrument(QUIET)
        again = pptrace.instrument(QUIET)
        assert again is first
        wrapper = getattr(consumer, ATTACH)
        assert is_wrapped(wrapper) and wrapper.__wrapped__ is attach  # exactly one layer
        consumer.send({}, sample_output())
        assert first is not None and first.recorded == 1  # recorded once, not twice
        pptrace.uninstrument()
        pptrace.uninstrument()  # idempotent
        assert getattr(consumer, ATTACH) is attach


def test_an_older_wrapper_is_replaced_not_wrapped_again(engine: Any, tmp_path: Path) -> None:
    from pptrace.record.recorder import Recorder
    from pptrace.record.wrapper import wrap_attach

    consumer = write_consumer(tmp_path, "consumer_foreign")
    attach = getattr(engine, ATTACH)
    consumer.__dict__[ATTACH] = wrap_attach(attach, Recorder(QUIET))  # left by someone earlier
    pptrace.instrument(QUIET)
    assert getattr(consumer, ATTACH).__wrapped__ is attach
    pptrace.uninstrument()
    assert getattr(consumer, ATTACH) is attach


def test_modules_imported_after_instrument_are_patched(engine: Any, tmp_path: Path) -> None:
    attach = getattr(engine, ATTACH)
    pptrace.instrument(QUIET)
    late = write_consumer(tmp_path, "consumer_after")
    assert is_wrapped(getattr(late, ATTACH)) and unwrap(getattr(late, ATTACH)) is attach
    pptrace.uninstrument()
    assert getattr(late, ATTACH) is attach


def test_the_transport_module_imported_after_instrument_is_patched(
    engine: Any, tmp_path: Path
) -> None:
    parent = sys.modules[MODULE.rsplit(".", 1)[0]]
    saved = sys.modules.pop(MODULE)
    try:
        rec = pptrace.instrument(QUIET)
        assert rec is not None and rec._thread is None  # nothing loaded yet: nothing started
        fresh = importlib.import_module(MODULE)
        assert fresh is not saved
        assert is_wrapped(getattr(fresh, ATTACH)) and is_wrapped(getattr(fresh, EXTRACT))
        # The real loader stays: the hook's proxy is never seen after the import.
        assert type(fresh.__loader__) is type(saved.__loader__)
        assert fresh.__spec__ is not None and fresh.__spec__.loader is fresh.__loader__
        assert rec._thread is not None and rec._thread.is_alive()  # armed once patched
        late = write_consumer(tmp_path, "consumer_fresh")
        assert getattr(late, ATTACH) is getattr(fresh, ATTACH)
        pptrace.uninstrument()
        assert not is_wrapped(getattr(fresh, ATTACH)) and not is_wrapped(getattr(late, ATTACH))
    finally:
        sys.modules[MODULE] = saved
        setattr(parent, MODULE.rsplit(".", 1)[1], saved)


def _outcome(fn: Any, tensors: dict[str, Any], subject: Any) -> tuple[Any, ...]:
    try:
        result = fn(tensors, subject)
    except Exception as exc:
        return ("raised", type(exc), str(exc), list(tensors))
    return ("returned", type(result), list(tensors))


def _cases() -> list[tuple[str, Any, Any]]:
    t = torch.ones(2)
    key = "__sampling_observer_output__."
    return [
        ("attach", lambda: {"next_token_ids": t}, lambda: sample_output()),
        ("attach", lambda: {}, lambda: None),
        ("attach", lambda: {}, lambda: NotPP()),
        ("attach", lambda: {}, lambda: Output({})),
        ("attach", lambda: {}, lambda: Output({"a": t, 3: t})),
        ("attach", lambda: {}, lambda: Output({"a": [1, 2]})),
        ("attach", lambda: {key + "a": t}, lambda: Output({"a": t})),
        ("extract", lambda: {"next_token_ids": t}, lambda: Observer()),
        ("extract", lambda: {key + "a": t}, lambda: None),
        ("extract", lambda: {key + "a": t}, lambda: NotPP()),
        ("extract", lambda: {key + "a": [1]}, lambda: Observer()),
        ("extract", lambda: {key + "a": t, "x": t}, lambda: Observer()),
    ]


def test_the_patched_call_sites_behave_exactly_like_the_engine(
    engine: Any, tmp_path: Path
) -> None:
    consumer = write_consumer(tmp_path, "consumer_parity")
    raw = {"attach": getattr(engine, ATTACH), "extract": getattr(engine, EXTRACT)}
    expected = [_outcome(raw[d], make(), subject()) for d, make, subject in _cases()]
    rec = pptrace.instrument(QUIET)
    site = {"attach": getattr(consumer, ATTACH), "extract": getattr(consumer, EXTRACT)}
    assert all(is_wrapped(f) for f in site.values())
    got = [_outcome(site[d], make(), subject()) for d, make, subject in _cases()]
    assert got == expected
    assert sum(1 for o in expected if o[0] == "raised") == 8  # every engine error was exercised
    assert rec is not None and rec.recorded == len(_cases())


def test_absent_or_missing_modules_are_said_once_and_nothing_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert module_status("no_such_engine_pkg.transport") == "absent"
    assert module_status("sglang.srt.sampling.no_such_module") == "missing"
    assert module_status(MODULE) is None
    meta_path = list(sys.meta_path)
    with caplog.at_level(logging.WARNING, logger="pptrace"):
        for _ in range(3):
            patch = EnginePatch(lambda a, e, t: (a, e), ("no_such_engine_pkg.transport",))
            assert patch.apply() is False
    assert sys.meta_path == meta_path  # no import hook left behind
    said = [r.getMessage() for r in caplog.records if "no_such_engine_pkg" in r.getMessage()]
    assert said == ["pptrace: target module 'no_such_engine_pkg.transport' cannot be found for "
                    f"{sys.executable}; not tracing it"]


def test_a_failure_inside_pptrace_leaves_the_engine_untouched(
    engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(attach: Any, extract: Any, target: Any) -> tuple[Any, Any]:
        raise MemoryError("no room for wrappers")  # a stand-in for any failure in pptrace

    attach = getattr(engine, ATTACH)
    patch = EnginePatch(broken, (MODULE,))
    with caplog.at_level(logging.WARNING, logger="pptrace"):
        assert patch.apply() is True  # watching, but nothing was wrapped
        parent = sys.modules[MODULE.rsplit(".", 1)[0]]
        saved = sys.modules.pop(MODULE)
        try:
            fresh = importlib.import_module(MODULE)  # the engine's import still succeeds
            assert not is_wrapped(getattr(fresh, ATTACH))
        finally:
            sys.modules[MODULE] = saved
            setattr(parent, MODULE.rsplit(".", 1)[1], saved)
            patch.restore()
    assert getattr(engine, ATTACH) is attach
    said = [r.getMessage() for r in caplog.records if "cannot patch" in r.getMessage()]
    assert len(said) == 1 and "MemoryError" in said[0]
