"""A transport with its own key prefix: the ``@PREFIX`` grammar, the rule that learns a prefix,
and the wrappers' parity with such a transport (same return, same exception, same dict effects)
whether the prefix is given or learnt, with what they record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from pptrace.model import raw as R
from pptrace.model.errors import ConfigError
from pptrace.model.records import PREFIX as SGLANG_PREFIX
from pptrace.model.records import Direction
from pptrace.model.target import (
    DEFAULT_TARGETS,
    Target,
    as_targets,
    format_targets,
    learn_prefix,
    parse_target,
    parse_targets,
    prefix_of,
)
from pptrace.record.learnt import wrap_learning
from pptrace.record.wrapper import is_wrapped, unwrap, wrap_transport
from tests.helpers_core import ListSink, make_recorder
from tests.helpers_own_prefix import PREFIX, transport

# --- the grammar ------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "target"), [
    ("m.pp:attach_aux,pop_aux@__aux__.", Target("m.pp", "attach_aux", "pop_aux", "__aux__.")),
    ("m.pp:attach_aux,pop_aux", Target("m.pp", "attach_aux", "pop_aux")),
    ("m.pp@aux/", Target("m.pp", prefix="aux/")),
    ("m:a,b@x@y:z,", Target("m", "a", "b", "x@y:z,")),  # all after the first @, verbatim
])
def test_a_target_takes_its_prefix_after_the_at_sign(spec: str, target: Target) -> None:
    assert parse_target(spec) == target
    assert parse_target(target.spec) == target  # the spec writes it back as it reads
    assert as_targets(spec) == as_targets([target]) == (target,)  # instrument(targets=...)
    assert parse_targets(format_targets([target, DEFAULT_TARGETS[0]])) == (
        target, DEFAULT_TARGETS[0])


@pytest.mark.parametrize("spec", ["m@", "m:a,b@", "m:a@p", "@p"])
def test_a_malformed_prefix_spec_is_one_line_naming_it(spec: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_target(spec)
    assert "\n" not in str(info.value) and repr(spec) in str(info.value)


def test_one_transport_under_two_prefixes_is_refused() -> None:
    with pytest.raises(ConfigError, match="one transport given twice with different prefixes"):
        parse_targets("m:a,b@x.;m:a,b@y.")


def test_the_prefix_is_the_given_one_else_the_engines_else_learnt() -> None:
    assert prefix_of(parse_target("m:a,b@__aux__.")) == "__aux__."
    assert prefix_of(DEFAULT_TARGETS[0]) == SGLANG_PREFIX
    assert prefix_of(parse_target("m:a,b")) is None
    assert prefix_of(parse_target("vendored.sampling_observer_pp")) is None  # not SGLang's


@pytest.mark.parametrize(("keys", "prefix"), [
    (["__aux__.scores", "__aux__.ids"], "__aux__."),
    (["__aux__.scores"], "__aux__."),  # one key: up to its last separator
    ([SGLANG_PREFIX + "scores", SGLANG_PREFIX + "ids"], SGLANG_PREFIX),
    (["my.aux.scores", "my.aux.ids"], "my.aux."),
    (["aux/scores", "aux/ids"], "aux/"),
    (["aux:scores"], "aux:"),
    (["aux_scores", "aux_ids"], None),  # no separator: nothing learnt (give @PREFIX)
    (["__aux__.s", "other.t"], None),  # no common beginning
    ([1, "__aux__.s"], "__aux__."),  # a non-str key says nothing
    ([], None),
    (["__aux__.layer.0", "__aux__.layer.1"], "__aux__.layer."),  # documented: too long
])
def test_the_learnt_prefix_is_the_common_beginning_to_its_last_separator(
    keys: list[Any], prefix: str | None
) -> None:
    assert learn_prefix(keys) == prefix


# --- parity ------------------------------------------------------------------------------------


class Output:
    def __init__(self, named: Any) -> None:
        self.named = named

    def to_pp_tensors(self) -> Any:
        return self.named


RETURNED = object()  # what the observer rebuilds: the same object whichever function ran


class Observer:
    def from_pp_tensors(self, tensors: Any) -> Any:
        return RETURNED


class Lost:
    def from_pp_tensors(self, tensors: Any) -> Any:
        return None


T = torch.ones(2, 3)
IDS = torch.arange(2)
L = [1.0]  # not a tensor; one object, so that both calls' dicts hold the same values


def _aux(**named: Any) -> dict[str, Any]:
    return {"next_token_ids": IDS, **{PREFIX + k: v for k, v in named.items()}}


# (name, direction, the dict, the output or observer)
CALLS: list[tuple[str, str, Callable[[], dict[Any, Any]], Callable[[], Any]]] = [
    ("attach", "attach", lambda: {"next_token_ids": IDS},
     lambda: Output({"scores": T, "ids": IDS})),
    ("attach None", "attach", lambda: {"next_token_ids": IDS}, lambda: None),
    ("attach not pp", "attach", lambda: {}, lambda: object()),
    ("attach empty", "attach", lambda: {}, lambda: Output({})),
    ("attach bad name", "attach", lambda: {}, lambda: Output({"a": T, 1: T})),
    ("attach not a tensor", "attach", lambda: {}, lambda: Output({"a": T, "b": L})),
    ("attach duplicate", "attach", lambda: _aux(scores=T), lambda: Output({"scores": T})),
    ("extract", "extract", lambda: _aux(scores=T, ids=IDS), Observer),
    ("extract nothing", "extract", lambda: {"next_token_ids": IDS}, Observer),
    ("extract no observer", "extract", lambda: _aux(scores=T), lambda: None),
    ("extract not pp", "extract", lambda: _aux(scores=T), object),
    ("extract not a tensor", "extract", lambda: _aux(scores=T, ids=L), Observer),
    ("extract not rebuilt", "extract", lambda: _aux(scores=T), Lost),
]


def _call(fn: Any, tensors: dict[Any, Any], subject: Any) -> tuple[Any, Any]:
    try:
        return fn(tensors, subject), None
    except Exception as exc:
        return None, exc


@pytest.mark.parametrize("given", [True, False], ids=["given", "learnt"])
@pytest.mark.parametrize(("name", "direction", "tensors", "subject"), CALLS,
                         ids=[c[0] for c in CALLS])
def test_the_wrappers_change_nothing_a_transport_with_its_own_prefix_does(
    given: bool, name: str, direction: str, tensors: Callable[[], dict[Any, Any]],
    subject: Callable[[], Any],
) -> None:
    mod = transport()
    rec = make_recorder(ListSink())
    if given:
        rec.prefix = PREFIX
        attach, extract = wrap_transport(mod.attach_aux, mod.pop_aux, rec, PREFIX)
    else:
        rec.prefix = None
        attach, extract = wrap_learning(mod.attach_aux, mod.pop_aux, rec)
    assert is_wrapped(attach) and is_wrapped(extract)
    assert (unwrap(attach), unwrap(extract)) == (mod.attach_aux, mod.pop_aux)
    real, wrapped = (mod.attach_aux, attach) if direction == "attach" else (mod.pop_aux, extract)
    d_real, d_wrapped = tensors(), tensors()
    s = subject()
    got_real, exc_real = _call(real, d_real, s)
    got, exc = _call(wrapped, d_wrapped, s)
    assert got is got_real
    assert (type(exc), str(exc)) == (type(exc_real), str(exc_real))
    # The dict: the same keys in the same order, the same objects under them.
    assert list(d_wrapped) == list(d_real)
    assert all(d_wrapped[k] is d_real[k] for k in d_real)
    assert len(rec.buffer) == 1  # recorded, once


def _events(rec: Any, sink: ListSink) -> list[Any]:
    rec.flush()
    return sink.events


@pytest.mark.parametrize("given", [True, False], ids=["given", "learnt"])
def test_a_round_trip_records_both_ends_under_the_transports_prefix(given: bool) -> None:
    mod = transport()
    sink = ListSink()
    rec = make_recorder(sink)
    rec.prefix = PREFIX if given else None
    attach, extract = (wrap_transport(mod.attach_aux, mod.pop_aux, rec, PREFIX) if given
                       else wrap_learning(mod.attach_aux, mod.pop_aux, rec))
    d = {"next_token_ids": IDS}
    attach(d, Output({"scores": T, "ids": IDS}))
    d[PREFIX + "scores"] = d[PREFIX + "scores"].half()
    assert extract(d, Observer()) is RETURNED
    a, e = _events(rec, sink)
    assert (a.direction, e.direction) == (Direction.ATTACH, Direction.EXTRACT)
    assert [(t.name, t.key, t.dtype) for t in a.tensors] == [
        ("scores", PREFIX + "scores", "float32"), ("ids", PREFIX + "ids", "int64")]
    assert [(t.name, t.key, t.dtype) for t in e.tensors] == [
        ("scores", PREFIX + "scores", "float16"), ("ids", PREFIX + "ids", "int64")]
    rec.shutdown()
    assert sink.stats[-1].prefix == PREFIX  # recorded in the trace for the analyzer


def test_a_process_that_only_extracts_learns_the_prefix_from_what_it_removed() -> None:
    mod = transport()
    sink = ListSink()
    rec = make_recorder(sink)
    rec.prefix = None
    _, extract = wrap_learning(mod.attach_aux, mod.pop_aux, rec)
    assert extract({"next_token_ids": IDS}, Observer()) is None  # nothing to learn from yet
    d = _aux(scores=T, ids=IDS)
    assert extract(d, Observer()) is RETURNED
    rec.flush()  # the recorder's thread learns the prefix as it writes the events
    assert rec.prefix == PREFIX
    with pytest.raises(RuntimeError, match="without a sampling observer"):
        extract(_aux(scores=T), None)  # raised: removed nothing; the learnt prefix picks
    nothing, popped, failed = _events(rec, sink)
    assert nothing.tensors == ()
    assert [t.name for t in popped.tensors] == ["scores", "ids"]
    assert [t.name for t in failed.tensors] == ["scores"] and failed.error_type is not None
    rec.shutdown()
    assert sink.stats[-1].prefix == PREFIX


def test_a_learning_extract_runs_the_one_extract_body() -> None:
    """One implementation: the extract that learns its prefix is the wrapper's extract body made
    without a prefix, not a second copy of it (which drifts from the first)."""
    mod = transport()
    rec = make_recorder(ListSink())
    rec.prefix = None
    _, learning = wrap_learning(mod.attach_aux, mod.pop_aux, rec)
    _, given = wrap_transport(mod.attach_aux, mod.pop_aux, make_recorder(ListSink()), PREFIX)
    assert learning.__code__ is given.__code__
    # The same body removed what it picks by a prefix, read by the same hot loop's form.
    d = _aux(scores=T, ids=IDS)
    assert learning(d, Observer()) is RETURNED
    keys = rec.buffer[-1][R.ITEMS][::5]
    assert keys == [PREFIX + "scores", PREFIX + "ids"]
