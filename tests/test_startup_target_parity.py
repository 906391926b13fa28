"""The differential suite of ``tests/test_parity.py``, run on a target: a module that vendors
SGLang's real functions under other names, patched by pptrace's target patching and called
through a consumer that imported them by name, must be indistinguishable from SGLang's module.

The suite's own comparison and recording checks are reused as they are; only its list of
transports is replaced, by SGLang's real functions and the patched target's by-name call site:

- hypothesis-drawn attach, extract and call-sequence cases, through ``EnginePatch`` with the
  suite's call-capturing wrappers (a fresh patch per example, restored before the next);
- every named engine error, through the public ``pptrace.instrument(targets=...)``.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import pptrace
import tests.test_parity as parity
from pptrace.activation.patch import EnginePatch
from pptrace.model.config import Config
from pptrace.model.target import Target
from pptrace.record.wrapper import is_wrapped, unwrap, wrap_transport
from tests.helpers_core import Capture, ListSink, make_recorder

pytestmark = pytest.mark.slow  # every test runs traced subprocesses

# A fork that vendors SGLang's transport: the same code and globals (so the same Protocols and
# messages), as new function objects under other names, as a copied file would have.
VENDORED = f'''"""SGLang's transport, vendored under other names."""
import types as _types

import {parity.REAL.__name__} as _engine


def _vendor(fn, name):
    copy = _types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = name
    return copy


put_aux = _vendor(_engine.{parity.ATTACH_NAME}, "put_aux")
take_aux = _vendor(_engine.{parity.EXTRACT_NAME}, "take_aux")
'''
CONSUMER = "from vendored_pp_transport import put_aux as attach_site, take_aux as extract_site\n"
TARGET = Target("vendored_pp_transport", "put_aux", "take_aux")
REAL_ATTACH = getattr(parity.REAL, parity.ATTACH_NAME)
REAL_EXTRACT = getattr(parity.REAL, parity.EXTRACT_NAME)


@pytest.fixture
def modules(tmp_path: Path) -> Iterator[tuple[types.ModuleType, types.ModuleType]]:
    (tmp_path / "vendored_pp_transport.py").write_text(VENDORED)
    (tmp_path / "vendored_pp_consumer.py").write_text(CONSUMER)
    sys.path.insert(0, str(tmp_path))
    try:
        vendored = importlib.import_module("vendored_pp_transport")
        consumer = importlib.import_module("vendored_pp_consumer")
        assert vendored.put_aux is not REAL_ATTACH and vendored.put_aux.__code__ is (
            REAL_ATTACH.__code__)
        yield vendored, consumer
    finally:
        pptrace.uninstrument()
        sys.path.remove(str(tmp_path))
        for name in ("vendored_pp_transport", "vendored_pp_consumer"):
            sys.modules.pop(name, None)


@pytest.fixture
def patched_variants(
    modules: tuple[types.ModuleType, types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[int]]:
    """Replace the suite's transports by [SGLang's, the patched target's call site]."""
    vendored, consumer = modules
    originals = vendored.put_aux, vendored.take_aux
    live: list[EnginePatch] = []
    examples = [0]

    def restore() -> None:
        while live:
            live.pop().restore()
            assert (consumer.attach_site, consumer.extract_site) == originals  # exact restore
            assert (vendored.put_aux, vendored.take_aux) == originals

    def variants() -> list[parity.Variant]:
        restore()
        sink = ListSink()
        rec = make_recorder(sink)
        inner: list[tuple[Capture, Capture]] = []

        def factory(attach: Callable[..., Any], extract: Callable[..., Any],
                    target: Any) -> tuple[Any, Any]:
            inner.append((Capture(attach), Capture(extract)))
            return wrap_transport(inner[-1][0], inner[-1][1], rec)

        patch = EnginePatch(factory, [TARGET])
        assert patch.apply() and len(inner) == 1
        live.append(patch)
        assert is_wrapped(consumer.attach_site) and unwrap(consumer.attach_site) is inner[0][0]
        assert consumer.extract_site is vendored.take_aux  # the by-name site holds the wrapper
        examples[0] += 1
        return [
            parity.Variant("real", REAL_ATTACH, REAL_EXTRACT),
            parity.Variant("target", consumer.attach_site, consumer.extract_site, sink, rec,
                           inner[0]),
        ]

    monkeypatch.setattr(parity, "variants", variants)
    yield examples
    restore()


def test_attach_on_a_target_is_indistinguishable(patched_variants: list[int]) -> None:
    parity.test_attach_is_indistinguishable()
    assert patched_variants[0] >= 50  # the suite really ran through the target


def test_extract_on_a_target_is_indistinguishable(patched_variants: list[int]) -> None:
    parity.test_extract_is_indistinguishable()
    assert patched_variants[0] >= 50


def test_call_sequences_on_a_target_are_indistinguishable(patched_variants: list[int]) -> None:
    parity.test_call_sequences_are_indistinguishable()
    assert patched_variants[0] >= 50


def _instrumented(consumer: types.ModuleType) -> Callable[[], list[parity.Variant]]:
    def variants() -> list[parity.Variant]:
        assert is_wrapped(consumer.attach_site) and is_wrapped(consumer.extract_site)
        return [parity.Variant("real", REAL_ATTACH, REAL_EXTRACT),
                parity.Variant("instrument(targets=...)", consumer.attach_site,
                               consumer.extract_site)]
    return variants


@pytest.mark.parametrize(("case", "message"), parity.ATTACH_ERRORS)
def test_each_attach_error_on_an_instrumented_target(
    modules: tuple[types.ModuleType, types.ModuleType], monkeypatch: pytest.MonkeyPatch,
    case: Any, message: str,
) -> None:
    rec = pptrace.instrument(Config(exporters=("none",)), targets=TARGET.spec)
    monkeypatch.setattr(parity, "variants", _instrumented(modules[1]))
    outs = parity.run_attach_case(case)
    assert outs[0].error() == outs[1].error() == (RuntimeError, message)
    assert rec is not None and rec.recorded == 1


@pytest.mark.parametrize(("case", "message"), parity.EXTRACT_ERRORS)
def test_each_extract_error_on_an_instrumented_target(
    modules: tuple[types.ModuleType, types.ModuleType], monkeypatch: pytest.MonkeyPatch,
    case: Any, message: str,
) -> None:
    rec = pptrace.instrument(Config(exporters=("none",)), targets=TARGET.spec)
    monkeypatch.setattr(parity, "variants", _instrumented(modules[1]))
    outs = parity.run_extract_case(case)
    assert outs[0].error() == outs[1].error() == (RuntimeError, message)
    assert rec is not None and rec.recorded == 1
