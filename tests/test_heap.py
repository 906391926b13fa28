"""The collector is held off while a trace or an analysis is made, and always put back.

``pptrace.model.heap.bulk`` disables the cyclic collector for its body and, at the end, moves
what is tracked into the oldest generation without a pass; it never leaves anything frozen,
never thaws a caller's frozen objects, and puts the collector back even when the body raises.
``load_paths`` and ``analysis`` run inside it; an analysis holds no reference cycle, so
dropping it frees it without the collector. ``kept`` freezes what is tracked for its body (the
viewer's life) and thaws it after, unless a caller had frozen things itself.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

import pptrace.analyze.analyzer as analyzer
import pptrace.load.loader as loader
from pptrace.model.heap import bulk, kept
from tests.helpers_analyze import Run, mt


@pytest.fixture(autouse=True)
def _collector() -> Iterator[None]:
    """Each test starts with the collector on and nothing frozen, and leaves it so."""
    gc.enable()
    yield
    gc.unfreeze()
    gc.enable()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_the_collector_is_off_inside_and_back_on_after_a_raise() -> None:
    seen = []
    with pytest.raises(RuntimeError), bulk():
        seen.append(gc.isenabled())
        raise RuntimeError("boom")
    assert seen == [False] and gc.isenabled()


def test_a_caller_that_turned_it_off_keeps_it_off() -> None:
    gc.disable()
    with bulk():
        pass
    assert not gc.isenabled()


def test_what_was_made_inside_goes_to_the_oldest_generation_and_nothing_stays_frozen() -> None:
    with bulk():
        made = [[i] for i in range(1000)]  # (lists are always tracked)
    assert gc.get_freeze_count() == 0
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(d) in oldest for d in made)


def test_cyclic_garbage_made_inside_is_still_collected() -> None:
    with bulk():
        ref = weakref.ref(_Node())
    assert ref() is not None  # held off: nothing collected it
    gc.collect()
    assert ref() is None


def test_a_callers_frozen_objects_stay_frozen() -> None:
    kept = [{"n": i} for i in range(100)]
    gc.freeze()
    frozen = gc.get_freeze_count()
    with bulk():
        made = [{"n": i} for i in range(100)]
    assert gc.get_freeze_count() == frozen > 0
    assert kept and made


@pytest.mark.parametrize("where", ["load", "analyze"])
def test_loading_and_analysing_put_the_collector_back_when_they_raise(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str) -> None:
    seen = []

    def fail(*_: object) -> None:
        seen.append(gc.isenabled())
        raise RuntimeError("boom")

    if where == "load":
        monkeypatch.setattr(loader, "_load", fail)
        call = lambda: loader.load_paths([str(tmp_path)])  # noqa: E731
    else:
        monkeypatch.setattr(analyzer, "_analysis", fail)
        call = lambda: analyzer.analysis(Run(pp_size=2).trace())  # noqa: E731
    with pytest.raises(RuntimeError):
        call()
    assert seen == [False] and gc.isenabled() and gc.get_freeze_count() == 0


def test_an_analysis_is_freed_when_dropped_without_the_collector() -> None:
    run = Run(pp_size=2)
    for k in range(3):
        run.message("proxy", [mt("hidden_states", (8, 16))], frm=0, to=1)
        run.message("output", [mt("next_token_ids", (8,), "int64")], frm=1, to=0, carries=k)
    trace = run.trace()
    analyzer.analysis(trace)  # (first use: whatever is cached stays)
    gc.collect()
    gc.disable()
    try:
        result = analyzer.analysis(trace)
        assert result.message_pairs  # the pairs a cycle would keep alive
        del result
        assert gc.collect() == 0  # nothing was left for the collector to find
    finally:
        gc.enable()


def test_kept_leaves_what_is_tracked_out_of_the_passes_and_thaws_it_after_a_raise() -> None:
    held = [[i] for i in range(100)]
    with pytest.raises(RuntimeError), kept():
        assert gc.get_freeze_count() >= len(held)
        tracked = {id(o) for o in gc.get_objects()}
        assert not any(id(o) in tracked for o in held)
        raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0
    tracked = {id(o) for o in gc.get_objects()}
    assert all(id(o) in tracked for o in held)


def test_kept_leaves_a_callers_freeze_as_it_was() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    with kept():
        made = [[0]]
    assert gc.get_freeze_count() == frozen  # not thawed by kept()
    assert id(made[0]) in {id(o) for o in gc.get_objects()}  # made after: not frozen


def test_keep_too_leaves_what_was_made_inside_kept_out_too_and_thaws_it_after() -> None:
    from pptrace.model.heap import keep_too

    with kept():
        later = [[i] for i in range(100)]  # a trace read while the viewer runs
        assert all(id(o) in {id(t) for t in gc.get_objects()} for o in later)
        assert keep_too()
        tracked = {id(o) for o in gc.get_objects()}
        assert not any(id(o) in tracked for o in later)
    assert gc.get_freeze_count() == 0
    tracked = {id(o) for o in gc.get_objects()}
    assert all(id(o) in tracked for o in later)


def test_keep_too_outside_kept_or_under_a_callers_freeze_does_nothing() -> None:
    from pptrace.model.heap import keep_too

    made = [[0]]
    assert not keep_too()
    assert gc.get_freeze_count() == 0 and id(made[0]) in {id(o) for o in gc.get_objects()}
    gc.freeze()
    frozen = gc.get_freeze_count()
    with kept():
        more = [[1]]
        assert not keep_too()  # kept() did not freeze: the caller's freeze is the caller's
    assert gc.get_freeze_count() == frozen
    assert id(more[0]) in {id(o) for o in gc.get_objects()}
