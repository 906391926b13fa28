"""Differential proof that pptrace changes nothing the engine sees.

Four transports run side by side on every generated input:

- ``real``: SGLang's released ``sampling_observer_pp`` module (from the wheel; never skipped),
- ``real+wrap``: the real functions wrapped by ``pptrace.record.wrapper.wrap_transport``, recording,
- ``ref``: pptrace's reference transport ``pptrace.record.engine``,
- ``ref+wrap``: the reference wrapped, recording.

Each run gets freshly built containers and user objects holding the *same* value objects, and the
four outcomes must agree on: the returned object (``is``), the exception type and message, the
dict's final keys in order and its values by identity, every call made into a user object (dict
subclasses, non-dict mappings, ``to_pp_tensors`` and the mapping it returns, ``__getattr__``,
``from_pp_tensors`` and what it received), and what the observer holds afterwards. The wrapped
runs must also re-raise the very exception object and return the very object the wrapped function
produced, and record exactly one event that tells the truth about the call.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import pptrace.record.engine as ref_engine
from pptrace.model import errors
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction
from pptrace.record.wrapper import is_wrapped, unwrap, wrap_transport
from tests.doubles import NotPP
from tests.helpers_core import (
    TENSOR_KINDS,
    VALUE_KINDS,
    Anything,
    BlockedObserver,
    BlockedOutput,
    CallLog,
    Capture,
    ListSink,
    LoggingStr,
    Observer,
    ObserverError,
    Outcome,
    Output,
    make_container,
    make_named,
    make_recorder,
    real_module,
    render_key,
    run_call,
    storage,
    value_pool,
)

REAL = real_module()
ATTACH_NAME = "add_auxiliary_output_to_pp_tensors"
EXTRACT_NAME = "pop_auxiliary_output_from_pp_tensors"
SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def qualname(tp: type) -> str:
    return tp.__qualname__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__qualname__}"


# --- the four transports ------------------------------------------------------------------------


@dataclass
class Variant:
    """One transport under comparison; wrapped ones carry their recorder, sink and captures."""

    label: str
    attach: Callable[..., Any]
    extract: Callable[..., Any]
    sink: ListSink | None = None
    recorder: Any = None
    inner: tuple[Capture, Capture] | None = None


def _wrapped(label: str, mod: types.ModuleType, config: Config | None = None) -> Variant:
    sink = ListSink()
    rec = make_recorder(sink, config)
    inner = (Capture(getattr(mod, ATTACH_NAME)), Capture(getattr(mod, EXTRACT_NAME)))
    attach, extract = wrap_transport(inner[0], inner[1], rec)
    return Variant(label, attach, extract, sink, rec, inner)


def variants() -> list[Variant]:
    """Fresh variants (fresh recorders) for one example."""
    return [
        Variant("real", getattr(REAL, ATTACH_NAME), getattr(REAL, EXTRACT_NAME)),
        _wrapped("real+wrap", REAL),
        Variant("ref", ref_engine.add_auxiliary_output_to_pp_tensors,
                ref_engine.pop_auxiliary_output_from_pp_tensors),
        # Fingerprinting (opt-in; reads tensor memory) must be just as invisible to the engine.
        _wrapped("ref+wrap", ref_engine, Config(exporters=("none",), fingerprint=True)),
    ]


def test_the_real_module_is_sglangs_own() -> None:
    """The suite compares against the released engine, not a copy of pptrace's reference."""
    assert REAL.__name__ == "sglang.srt.sampling.sampling_observer_pp"
    assert "site-packages" in (REAL.__file__ or "")
    assert REAL.add_auxiliary_output_to_pp_tensors is not (
        ref_engine.add_auxiliary_output_to_pp_tensors)
    assert REAL._OUTPUT_PREFIX == ref_engine._OUTPUT_PREFIX == PREFIX


# --- comparing outcomes -------------------------------------------------------------------------


def assert_same(base: Outcome, other: Outcome, label: str) -> None:
    """``other`` is indistinguishable from ``base`` for the engine."""
    assert other.result is base.result, f"{label}: returned a different object"
    assert other.error() == base.error(), f"{label}: raised {other.error()} != {base.error()}"
    assert other.keys == base.keys, f"{label}: final keys differ"
    assert other.value_ids == base.value_ids, f"{label}: final values differ (identity)"
    assert other.calls == base.calls, f"{label}: calls into user objects differ"
    assert other.received == base.received, f"{label}: the observer received something else"


def check_recording(
    v: Variant, direction: Direction, out: Outcome, before: list[tuple[Any, Any]],
    subject: Any, container_kind: str,
) -> None:
    """The wrapped variant returned/raised what it wrapped, and recorded one truthful event."""
    assert v.sink is not None and v.inner is not None
    capture = v.inner[0] if direction is Direction.ATTACH else v.inner[1]
    assert out.exc is capture.exc, f"{v.label}: not the very exception object the engine raised"
    assert out.result is capture.result, f"{v.label}: not the very object the engine returned"
    v.recorder.flush()
    assert v.recorder.internal_errors == 0
    assert len(v.sink.events) == 1, f"{v.label}: expected one event, got {len(v.sink.events)}"
    ev = v.sink.events[0]
    assert ev.direction is direction and ev.seq == 0
    assert ev.subject_type == qualname(type(subject))
    if out.exc is None:
        assert ev.ok and ev.error_message is None
        assert ev.returned_none is (out.result is None)
    else:
        assert ev.error_type == qualname(type(out.exc))
        assert ev.error_message == str(out.exc)
    if container_kind == "mutable_mapping":
        # pptrace never calls into a container that is not a dict: nothing is read from it.
        assert ev.keys_before == ev.keys_after == () and ev.tensors == ()
        return
    assert ev.keys_before == tuple(render_key(k) for k, _ in before)
    assert ev.keys_after == tuple(render_key(k) for k in out.keys)
    after = storage_pairs(out)
    if direction is Direction.ATTACH:
        seen = after[len(before):]
        assert [k for k, _ in after[: len(before)]] == [k for k, _ in before]
    else:
        seen = [(k, val) for k, val in before if isinstance(k, str) and k.startswith(PREFIX)]
    assert [t.key for t in ev.tensors] == [k for k, _ in seen]
    assert list(ev.names) == [k[len(PREFIX):] for k, _ in seen]
    for meta, (_, value) in zip(ev.tensors, seen, strict=True):
        assert meta.is_tensor is torch.is_tensor(value)
        if meta.is_tensor:
            assert meta.shape == tuple(value.shape)
            assert meta.dtype == str(value.dtype).removeprefix("torch.")
            assert meta.device == str(value.device)
            assert meta.nbytes == value.numel() * value.element_size()
            assert meta.contiguous is value.is_contiguous()
        else:
            assert meta.dtype == qualname(type(value))
    expected_inserted = tuple(k for k, _ in seen) if (
        direction is Direction.ATTACH and out.exc is not None) else ()
    assert ev.inserted_before_error == expected_inserted


def outcome_label(out: Outcome) -> str:
    """A coarse name for an outcome (see ``pytest --hypothesis-show-statistics``)."""
    if out.exc is None:
        return "returned None" if out.result is None else "returned an object"
    message = str(out.exc)
    for known in ("is not a tensor", "duplicate auxiliary"):
        if known in message:
            return f"{type(out.exc).__name__}: ...{known}..."
    return f"{type(out.exc).__name__}: {message}"


_VALUES_BY_ID: dict[int, Any] = {}


def storage_pairs(out: Outcome) -> list[tuple[Any, Any]]:
    return [(k, _VALUES_BY_ID[i]) for k, i in zip(out.keys, out.value_ids, strict=True)]


def remember(pool: dict[str, Any]) -> None:
    _VALUES_BY_ID.clear()
    for value in pool.values():
        _VALUES_BY_ID[id(value)] = value


# --- attach -------------------------------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "scores", "x.y", "__msg_type__", "next_token_ids", PREFIX] * 3
                        + ["", 0, 1, None, b"a"])
VALUES = st.one_of(st.sampled_from(TENSOR_KINDS), st.sampled_from(VALUE_KINDS))
ATTACH_KEYS = st.sampled_from(["next_token_ids", "__msg_type__", "logprobs", PREFIX + "a",
                               PREFIX + "scores", PREFIX + PREFIX, 7, ("t", 1)])
CONTAINERS = st.sampled_from(["dict", "logging_dict", "mutable_mapping"])


@dataclass(frozen=True)
class AttachCase:
    container: str
    entries: tuple[tuple[Any, str], ...]  # (key, value kind) already in the dict
    output: str  # none | not_pp | blocked | anything | output | raising
    named: str  # to_pp_tensors returns: dict | mapping | none | list | empty_dict | empty_mapping
    items: tuple[tuple[Any, str], ...]  # (name, value kind) in the returned mapping


attach_cases = st.builds(
    AttachCase,
    container=CONTAINERS,
    entries=st.lists(st.tuples(ATTACH_KEYS, VALUES), max_size=4,
                     unique_by=lambda e: e[0]).map(tuple),
    output=st.sampled_from(["output"] * 6 + ["none", "not_pp", "blocked", "anything", "raising"]),
    named=st.sampled_from(["dict"] * 3 + ["mapping"] * 3 + ["none", "list", "empty_dict",
                                                           "empty_mapping"]),
    items=st.lists(st.tuples(NAMES, VALUES), min_size=1, max_size=6).map(tuple),
)


def make_output(case: AttachCase, pool: dict[str, Any], exc: BaseException, log: CallLog) -> Any:
    """A fresh output (with a fresh mapping on each ``to_pp_tensors``) holding pool values."""

    def named() -> Any:
        if case.named.startswith("empty_"):
            return make_named(log, case.named[len("empty_"):], [])
        return make_named(log, case.named, [(n, pool[kind]) for n, kind in case.items])

    return {
        "none": lambda: None,
        "not_pp": NotPP,
        "blocked": BlockedOutput,
        "anything": lambda: Anything(log, named),
        "output": lambda: Output(log, named),
        "raising": lambda: Output(log, named, exc),
    }[case.output]()


def build_attach(case: AttachCase, pool: dict[str, Any], exc: BaseException,
                 log: CallLog) -> tuple[Any, Any, list[tuple[Any, Any]]]:
    """A fresh (container, output) pair for one run, holding the shared pool's values."""
    pairs = [(k, pool[kind]) for k, kind in case.entries]
    return make_container(case.container, pairs, log), make_output(case, pool, exc, log), pairs


def run_attach_case(case: AttachCase) -> list[Outcome]:
    pool = value_pool()
    remember(pool)
    exc = ObserverError("to_pp_tensors failed")
    outcomes = []
    for v in variants():
        log = CallLog()
        container, output, before = build_attach(case, pool, exc, log)
        out = run_call(v.attach, container, output, log)
        if v.sink is not None:
            check_recording(v, Direction.ATTACH, out, before, output, case.container)
        outcomes.append((v.label, out))
    base = outcomes[0][1]
    for label, out in outcomes[1:]:
        assert_same(base, out, label)
    if case.output == "raising":
        assert base.exc is exc  # the output's own exception object, untouched
    return [out for _, out in outcomes]


@SETTINGS
@given(attach_cases)
def test_attach_is_indistinguishable(case: AttachCase) -> None:
    event(outcome_label(run_attach_case(case)[0]))


# --- extract ------------------------------------------------------------------------------------

EXTRACT_KEYS = st.sampled_from(
    ["next_token_ids", "__msg_type__", PREFIX + "a", PREFIX + "b", PREFIX + "scores", PREFIX,
     PREFIX + PREFIX + "a", "__sampling_observer_output_"] * 3
    + [LoggingStr(PREFIX + "c"), LoggingStr("plain"), 7])
OBSERVERS = st.sampled_from(
    ["return"] * 4 + ["none", "raise", "pop", "add", "clear", "no_observer", "not_pp", "blocked",
                      "anything"])


@dataclass(frozen=True)
class ExtractCase:
    container: str
    entries: tuple[tuple[Any, str], ...]
    observer: str


extract_cases = st.builds(
    ExtractCase,
    container=CONTAINERS,
    entries=st.lists(st.tuples(EXTRACT_KEYS, VALUES), max_size=6,
                     unique_by=lambda e: e[0]).map(tuple),
    observer=OBSERVERS,
)


def make_observer(kind: str, result: Any, exc: BaseException, log: CallLog) -> Any:
    return {
        "no_observer": lambda: None,
        "not_pp": NotPP,
        "blocked": BlockedObserver,
        "anything": lambda: Anything(log, lambda: result),
    }.get(kind, lambda: Observer(log, kind, result, exc))()


def build_extract(case: ExtractCase, pool: dict[str, Any], result: Any, exc: BaseException,
                  log: CallLog) -> tuple[Any, Any, list[tuple[Any, Any]]]:
    pairs = [(k, pool[kind]) for k, kind in case.entries]
    container = make_container(case.container, pairs, log)
    return container, make_observer(case.observer, result, exc, log), pairs


def run_extract_case(case: ExtractCase) -> list[Outcome]:
    pool = value_pool()
    remember(pool)
    result = object()  # what a healthy observer rebuilds: compared by identity
    exc = ObserverError("observer failed")
    outcomes = []
    for v in variants():
        log = CallLog()
        container, observer, before = build_extract(case, pool, result, exc, log)
        out = run_call(v.extract, container, observer, log)
        if v.sink is not None:
            check_recording(v, Direction.EXTRACT, out, before, observer, case.container)
        outcomes.append((v.label, out))
    base = outcomes[0][1]
    for label, out in outcomes[1:]:
        assert_same(base, out, label)
    if case.observer == "raise" and base.exc is not None and isinstance(base.exc, ObserverError):
        assert base.exc is exc
    return [out for _, out in outcomes]


@SETTINGS
@given(extract_cases)
def test_extract_is_indistinguishable(case: ExtractCase) -> None:
    event(outcome_label(run_extract_case(case)[0]))


# --- sequences of calls on one dict (reuse, re-attach, extract after attach) -------------------


@dataclass(frozen=True)
class Step:
    output: AttachCase | None  # an attach step (only its output fields are used)
    observer: str = ""  # an extract step


steps = st.lists(
    st.one_of(
        attach_cases.map(lambda c: Step(c)),
        OBSERVERS.map(lambda o: Step(None, o)),
    ),
    min_size=2, max_size=5,
)


@SETTINGS
@given(container=CONTAINERS,
       entries=st.lists(st.tuples(ATTACH_KEYS, VALUES), max_size=3, unique_by=lambda e: e[0]),
       sequence=steps)
def test_call_sequences_are_indistinguishable(
    container: str, entries: list[tuple[Any, str]], sequence: list[Step]
) -> None:
    pool = value_pool()
    remember(pool)
    result, exc = object(), ObserverError("failed")
    runs = []
    for v in variants():
        log = CallLog()
        tensors = make_container(container, [(k, pool[kind]) for k, kind in entries], log)
        outs = []
        for step in sequence:
            if step.output is not None:
                outs.append(run_call(v.attach, tensors, make_output(step.output, pool, exc, log),
                                     log))
            else:
                outs.append(run_call(v.extract, tensors,
                                     make_observer(step.observer, result, exc, log), log))
        runs.append((v, outs))
    for v, outs in runs[1:]:
        for i, (base, out) in enumerate(zip(runs[0][1], outs, strict=True)):
            assert_same(base, out, f"{v.label}, step {i}")
        if v.sink is not None:
            v.recorder.flush()
            assert v.recorder.internal_errors == 0
            directions = [Direction.ATTACH if s.output is not None else Direction.EXTRACT
                          for s in sequence]
            assert [e.direction for e in v.sink.events] == directions
            for direction in Direction:
                seqs = [e.seq for e in v.sink.events if e.direction is direction]
                assert seqs == list(range(len(seqs)))
            for event, out in zip(v.sink.events, outs, strict=True):
                assert event.error_message == (None if out.exc is None else str(out.exc))


# --- every error path, named (independent of what hypothesis happens to draw) -----------------

T = "t_f32"
ATTACH_ERRORS = [
    pytest.param(AttachCase("dict", (), "not_pp", "dict", ((("a", T),))),
                 errors.ATTACH_NOT_PP, id="not-pp"),
    pytest.param(AttachCase("dict", (), "blocked", "dict", ()), errors.ATTACH_NOT_PP,
                 id="blocked-protocol"),
    pytest.param(AttachCase("dict", (), "output", "dict", ()), errors.ATTACH_EMPTY, id="empty"),
    pytest.param(AttachCase("dict", (), "output", "none", ()), errors.ATTACH_EMPTY,
                 id="to_pp_tensors-returns-None"),
    pytest.param(AttachCase("logging_dict", (), "output", "mapping", (("a", T), (3, T))),
                 errors.ATTACH_BAD_NAME, id="int-name-after-a-good-one"),
    pytest.param(AttachCase("dict", (), "output", "dict", (("", T),)), errors.ATTACH_BAD_NAME,
                 id="empty-name"),
    pytest.param(AttachCase("dict", (), "output", "dict", (("a", T), ("b", "list"))),
                 errors.ATTACH_NOT_TENSOR.format(name="b"), id="list-value"),
    pytest.param(AttachCase("dict", (), "output", "mapping", (("a", "ndarray"),)),
                 errors.ATTACH_NOT_TENSOR.format(name="a"), id="numpy-value"),
    pytest.param(AttachCase("logging_dict", ((PREFIX + "a", T),), "output", "dict", (("a", T),)),
                 errors.ATTACH_DUPLICATE.format(name="a"), id="duplicate-in-dict"),
    pytest.param(AttachCase("dict", (), "output", "mapping", (("a", T), ("a", T))),
                 errors.ATTACH_DUPLICATE.format(name="a"), id="duplicate-in-mapping"),
]


@pytest.mark.parametrize(("case", "message"), ATTACH_ERRORS)
def test_each_attach_error(case: AttachCase, message: str) -> None:
    outs = run_attach_case(case)
    assert outs[0].error() == (RuntimeError, message)


EXTRACT_ERRORS = [
    pytest.param(ExtractCase("dict", ((PREFIX + "a", T),), "no_observer"),
                 errors.EXTRACT_NO_OBSERVER, id="no-observer"),
    pytest.param(ExtractCase("dict", ((PREFIX + "a", T),), "not_pp"), errors.EXTRACT_NOT_PP,
                 id="not-pp"),
    pytest.param(ExtractCase("dict", ((PREFIX + "a", T),), "blocked"), errors.EXTRACT_NOT_PP,
                 id="blocked-protocol"),
    pytest.param(ExtractCase("logging_dict", ((PREFIX + "a", T), (PREFIX + "b", "list")),
                             "return"), errors.EXTRACT_NOT_TENSOR, id="non-tensor"),
    pytest.param(ExtractCase("logging_dict", (("next_token_ids", T), (PREFIX + "a", T)), "none"),
                 errors.EXTRACT_NOT_RECONSTRUCTED, id="not-reconstructed"),
]


@pytest.mark.parametrize(("case", "message"), EXTRACT_ERRORS)
def test_each_extract_error(case: ExtractCase, message: str) -> None:
    outs = run_extract_case(case)
    assert outs[0].error() == (RuntimeError, message)


def test_user_exceptions_and_foreign_errors_pass_through() -> None:
    """The observer's own exception, a KeyError from an observer that adds a name, and the
    AttributeError of a non-str key all reach the caller unchanged."""
    raised = run_extract_case(ExtractCase("dict", ((PREFIX + "a", T),), "raise"))[0]
    assert isinstance(raised.exc, ObserverError)
    added = run_extract_case(ExtractCase("dict", ((PREFIX + "a", T),), "add"))[0]
    assert added.error() == (KeyError, repr(PREFIX + "added_by_observer"))
    assert added.keys == []  # "a" was deleted before the missing name was reached
    int_key = run_extract_case(ExtractCase("dict", ((7, T), (PREFIX + "a", T)), "return"))[0]
    assert int_key.error() == (AttributeError, "'int' object has no attribute 'startswith'")


@pytest.mark.parametrize("count", range(1, 7))
@pytest.mark.parametrize("container", ["dict", "logging_dict"])
def test_valid_outputs_attach_and_extract(count: int, container: str) -> None:
    """1 to 6 tensors go in under the prefix, in order, and come out to the observer."""
    items = tuple((f"n{i}", TENSOR_KINDS[i]) for i in range(count))
    attached = run_attach_case(
        AttachCase(container, (("next_token_ids", T),), "output", "dict", items))[0]
    assert attached.exc is None and attached.result is None
    assert attached.keys == ["next_token_ids"] + [PREFIX + n for n, _ in items]
    extracted = run_extract_case(ExtractCase(
        container, (("next_token_ids", T),) + tuple((PREFIX + n, kind) for n, kind in items),
        "return"))[0]
    assert extracted.exc is None and extracted.result is not None
    assert extracted.keys == ["next_token_ids"]
    assert extracted.received == [(tuple(n for n, _ in items), extracted.received[0][1])]


def test_observer_mutations_decide_what_is_deleted() -> None:
    """What the observer pops from the mapping it received stays in the dict (both engines)."""
    entries = ((PREFIX + "a", T), (PREFIX + "b", "t_i64"))
    popped = run_extract_case(ExtractCase("dict", entries, "pop"))[0]
    assert popped.exc is None and popped.keys == [PREFIX + "a"]
    cleared = run_extract_case(ExtractCase("dict", entries, "clear"))[0]
    assert cleared.exc is None and cleared.keys == [PREFIX + "a", PREFIX + "b"]


# --- the wrapper's own guarantees ---------------------------------------------------------------


def test_wrapping_twice_records_once() -> None:
    sink = ListSink()
    rec = make_recorder(sink)
    attach, _ = wrap_transport(ref_engine.add_auxiliary_output_to_pp_tensors,
                               ref_engine.pop_auxiliary_output_from_pp_tensors, rec)
    again, _ = wrap_transport(attach, ref_engine.pop_auxiliary_output_from_pp_tensors, rec)
    assert is_wrapped(again) and unwrap(again) is ref_engine.add_auxiliary_output_to_pp_tensors
    log = CallLog()
    again({}, Output(log, lambda: {"a": torch.zeros(1)}))
    rec.flush()
    assert len(sink.events) == 1


def test_a_failing_recorder_never_reaches_the_engine() -> None:
    """When recording itself fails, the engine still gets its own result and exception."""
    sink = ListSink()
    rec = make_recorder(sink)

    def broken(raw: Any) -> None:
        raise MemoryError("recorder is broken")

    rec.append = broken  # type: ignore[method-assign]
    attach, extract = wrap_transport(REAL.add_auxiliary_output_to_pp_tensors,
                                     REAL.pop_auxiliary_output_from_pp_tensors, rec)
    log = CallLog()
    tensors: dict[str, Any] = {}
    value = torch.zeros(2)
    assert attach(tensors, Output(log, lambda: {"a": value})) is None
    assert tensors == {PREFIX + "a": value}
    exc = ObserverError("boom")
    with pytest.raises(ObserverError) as info:
        extract(tensors, Observer(log, "raise", None, exc))
    assert info.value is exc
    assert rec.internal_errors == 2


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise ValueError("cannot print me")


def test_an_exception_that_cannot_be_printed_is_contained() -> None:
    sink = ListSink()
    rec = make_recorder(sink)
    _, extract = wrap_transport(REAL.add_auxiliary_output_to_pp_tensors,
                                REAL.pop_auxiliary_output_from_pp_tensors, rec)
    exc = UnprintableError()
    with pytest.raises(UnprintableError) as info:
        extract({PREFIX + "a": torch.zeros(1)}, Observer(CallLog(), "raise", None, exc))
    assert info.value is exc
    assert rec.internal_errors == 1


def test_disabled_recorder_calls_straight_through() -> None:
    sink = ListSink()
    rec = make_recorder(sink, Config(enabled=False, exporters=("none",)))
    attach, _ = wrap_transport(REAL.add_auxiliary_output_to_pp_tensors,
                               REAL.pop_auxiliary_output_from_pp_tensors, rec)
    tensors: dict[str, Any] = {}
    attach(tensors, Output(CallLog(), lambda: {"a": torch.zeros(1)}))
    rec.flush()
    assert list(tensors) == [PREFIX + "a"] and sink.events == []


def test_storage_helper_reads_without_calls() -> None:
    """The comparison itself must not call into user containers (or the logs would lie)."""
    log = CallLog()
    for kind in ("logging_dict", "mutable_mapping"):
        container = make_container(kind, [("k", 1)], log)
        assert storage(container) == [("k", 1)]
    assert log.calls == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
# torch warns that its sync debug mode is a prototype; the suite turns warnings into errors.
@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype")
@pytest.mark.parametrize("fingerprint", [False, True], ids=["plain", "fingerprint"])
def test_no_device_sync_on_the_callers_path(fingerprint: bool) -> None:
    """With CUDA tensors, the wrapped calls never synchronize with the device (CUDA's sync debug
    mode turns any synchronizing call into an error), fingerprints included."""
    sink = ListSink()
    rec = make_recorder(sink, Config(exporters=("none",), fingerprint=fingerprint))
    attach, extract = wrap_transport(REAL.add_auxiliary_output_to_pp_tensors,
                                     REAL.pop_auxiliary_output_from_pp_tensors, rec)
    named = {"scores": torch.randn(8, 5, device="cuda"),
             "empty": torch.empty(0, 4, device="cuda"),
             "strided": torch.randn(4, 6, device="cuda").t()}
    result = object()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        tensors: dict[str, Any] = {"next_token_ids": torch.arange(8, device="cuda")}
        attach(tensors, Output(CallLog(), lambda: named))
        out = extract(tensors, Observer(CallLog(), "return", result, ObserverError()))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert out is result and list(tensors) == ["next_token_ids"]
    rec.flush()
    assert rec.internal_errors == 0 and len(sink.events) == 2
    for ev in sink.events:
        assert [t.device_type for t in ev.tensors] == ["cuda"] * 3
        fps = [t.fingerprint for t in ev.tensors]
        if fingerprint:
            assert all(f is not None and f.startswith("x64:") for f in fps)
        else:
            assert fps == [None] * 3
    assert [t.fingerprint for t in sink.events[0].tensors] == [
        t.fingerprint for t in sink.events[1].tensors]



CALLS = [
    pytest.param((), {}, True, id="no-arguments"),
    pytest.param(({},), {}, True, id="one-argument"),
    pytest.param(({}, None, 1), {}, True, id="three-arguments"),
    pytest.param((), {"tensors": {}, "SUBJECT": None}, False, id="keywords"),
    pytest.param(({},), {"tensors": {}}, True, id="tensors-twice"),
    pytest.param(({},), {"x": None}, True, id="unknown-keyword"),
]


@pytest.mark.parametrize(("args", "kwargs", "fails"), CALLS)
@pytest.mark.parametrize("direction", ["attach", "extract"])
def test_calling_conventions_match(
    direction: str, args: tuple[Any, ...], kwargs: dict[str, Any], fails: bool
) -> None:
    """Keyword calls work, and a malformed call fails with the engine's own TypeError text."""
    subject = "output" if direction == "attach" else "observer"
    kwargs = {(subject if k == "SUBJECT" else k): v for k, v in kwargs.items()}
    outcomes = []
    for v in variants():
        try:
            outcomes.append(("returned", getattr(v, direction)(*args, **kwargs)))
        except TypeError as exc:
            outcomes.append(("TypeError", str(exc)))
    assert outcomes == [outcomes[0]] * 4, outcomes
    name = ATTACH_NAME if direction == "attach" else EXTRACT_NAME
    assert (outcomes[0][0] == "TypeError") is fails
    if fails:
        assert outcomes[0][1].startswith(name + "()")


def test_recording_keeps_no_engine_object_alive() -> None:
    """Buffered events hold metadata only: the tensors, the output, the observer and the
    observer's exception are freed as soon as the caller drops them, before any flush."""
    import gc
    import weakref

    sink = ListSink()
    rec = make_recorder(sink)
    attach, extract = wrap_transport(REAL.add_auxiliary_output_to_pp_tensors,
                                     REAL.pop_auxiliary_output_from_pp_tensors, rec)

    def calls() -> list[weakref.ref[Any]]:
        log = CallLog()
        named = {"a": torch.zeros(3), "b": torch.ones(2)}
        output = Output(log, lambda: named)
        exc = ObserverError("observer failed")
        observer = Observer(log, "raise", None, exc)
        tensors: dict[str, Any] = {"next_token_ids": torch.arange(2)}
        attach(tensors, output)
        with pytest.raises(ObserverError):
            extract(tensors, observer)
        return [weakref.ref(x) for x in (*named.values(), output, observer, exc,
                                         tensors["next_token_ids"])]

    refs = calls()
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)
    rec.flush()
    assert [e.error_message for e in sink.events] == [None, "observer failed"]


@pytest.mark.parametrize("word", [5, -(2**63) + 5, -1], ids=["low", "top-bit", "all-ones"])
def test_a_device_fingerprint_reads_every_64_bit_digest(word: int) -> None:
    """A CUDA tensor's fingerprint is ``torch.hash_tensor``'s uint64 digest, read back on the
    recorder's thread. Read through int64, every digest with its top bit set (half of them)
    raised and its event was lost: seen on a GPU (test above), shown here on the CPU with the
    digest's own dtype."""
    from pptrace.record.fingerprint import resolve

    digest = torch.tensor(word, dtype=torch.int64).view(torch.uint64)
    assert digest.dtype == torch.hash_tensor(torch.zeros(2)).dtype  # what a device hash gives
    assert resolve((digest, None)) == f"x64:{word & ((1 << 64) - 1):016x}"
