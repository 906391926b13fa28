"""The one payload comparison (``pptrace.analyze.payload``) and the categories of finding kinds.

``compare`` says what differs per name; ``same`` must give the same answer faster; the analyzer's
pair findings and its TP check are built on them.
"""

from __future__ import annotations

import random

import pytest

from pptrace.analyze.analyzer import analyze
from pptrace.analyze.payload import Field, compare, compare_events, same
from pptrace.analyze.rules import classify_error
from pptrace.model import errors
from pptrace.model.findings import Category, FindingKind, Severity
from pptrace.model.records import Direction, Event, RankInfo, TensorMeta
from tests.helpers_analyze import Run, meta

K = FindingKind
F = Field

# (left, right, the fields that differ for the first name, order differs)
CASES: list[tuple[str, list[TensorMeta], list[TensorMeta], frozenset[Field], bool]] = [
    ("equal", [meta("s")], [meta("s")], frozenset(), False),
    ("device index differs by design", [meta("s", device="cuda:0")],
     [meta("s", device="cuda:1")], frozenset(), False),
    ("device type", [meta("s", device="cuda:0")], [meta("s")], frozenset({F.DEVICE}), False),
    ("shape (and bytes with it)", [meta("s")], [meta("s", (4, 5))],
     frozenset({F.SHAPE, F.BYTES}), False),
    ("reshaped, same bytes", [meta("s")], [meta("s", (40,))], frozenset({F.SHAPE}), False),
    ("dtype", [meta("s")], [meta("s", dtype="int32")], frozenset({F.DTYPE}), False),
    ("tensor against non-tensor", [meta("s")], [meta("s", is_tensor=False)],
     frozenset({F.DTYPE}), False),
    ("bytes", [meta("s")], [meta("s", nbytes=1)], frozenset({F.BYTES}), False),
    ("content", [meta("s", fingerprint="a")], [meta("s", fingerprint="b")],
     frozenset({F.FINGERPRINT}), False),
    ("content on one side only agrees", [meta("s", fingerprint="a")], [meta("s")],
     frozenset(), False),
    ("name missing on the right", [meta("s"), meta("t")], [meta("s")], frozenset(), False),
    ("order", [meta("s"), meta("t")], [meta("t"), meta("s")], frozenset(), True),
]


@pytest.mark.parametrize(("left", "right", "fields", "order"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_compare_names_what_differs_and_same_agrees(
    left: list[TensorMeta], right: list[TensorMeta], fields: frozenset[Field], order: bool
) -> None:
    verdict = compare(tuple(left), tuple(right))
    assert verdict.names[0].differs == fields
    assert verdict.order_differs is order
    missing = {t.name for t in left} - {t.name for t in right}
    assert {t.name for t in verdict.missing} == missing
    assert all(line.differs == {F.NAME} for line in verdict.names if line.name in missing)
    expected_same = not fields and not order and not missing
    assert verdict.same is expected_same
    assert same(tuple(left), tuple(right)) is expected_same


def test_same_is_compare_on_random_payloads() -> None:
    rng = random.Random(7)

    def one() -> tuple[TensorMeta, ...]:
        names = rng.sample(["a", "b", "c"], rng.randint(0, 3))
        return tuple(meta(n, rng.choice([(2, 3), (6,)]), rng.choice(["float32", "int32"]),
                          rng.choice(["cpu", "cuda:0", "cuda:1"]),
                          fingerprint=rng.choice([None, "x", "y"])) for n in names)

    for _ in range(2000):
        a, b = one(), one()
        assert same(a, b) is compare(a, b).same, (a, b)


def test_compare_events_with_one_side_marks_nothing() -> None:
    ev = Event(direction=Direction.ATTACH, seq=0, rank=RankInfo(), start_ns=1, mono_ns=1,
               duration_ns=1, tensors=(meta("s"),))
    verdict = compare_events(ev, None)
    assert [(line.name, line.differs) for line in verdict.names] == [("s", frozenset())]
    assert compare_events(ev, ev).same


def test_every_kind_carries_category_severity_and_description() -> None:
    for kind in FindingKind:
        assert isinstance(kind.category, Category)
        assert isinstance(kind.default_severity, Severity)
        assert kind.description and "\n" not in kind.description
        assert FindingKind(kind.value) is kind


def test_engine_error_kinds_are_what_classify_error_returns() -> None:
    messages = [errors.ATTACH_NOT_PP, errors.ATTACH_EMPTY, errors.ATTACH_BAD_NAME,
                errors.ATTACH_NOT_TENSOR.format(name="x"), errors.ATTACH_DUPLICATE.format(name="x"),
                errors.EXTRACT_NO_OBSERVER, errors.EXTRACT_NOT_PP, errors.EXTRACT_NOT_TENSOR,
                errors.EXTRACT_NOT_RECONSTRUCTED, "something else"]
    found = set()
    for direction in Direction:
        for message in messages:
            ev = Event(direction=direction, seq=0, rank=RankInfo(), start_ns=1, mono_ns=1,
                       duration_ns=1, error_type="RuntimeError", error_message=message)
            found.add(classify_error(ev))
    engine = {k for k in FindingKind if k.category is Category.ENGINE_ERROR}
    assert found == engine


def test_tp_ranks_on_different_devices_of_one_type_agree() -> None:
    run = Run(pp_size=2, tp_size=2)
    for _ in range(2):
        run.attach([meta("e", (8,), device="cuda:2", fingerprint="f")], tp=0)
        run.attach([meta("e", (8,), device="cuda:3")], tp=1)  # no fingerprint: agrees too
        run.extract([meta("e", (8,), device="cuda:0", fingerprint="f")], tp=0)
        run.extract([meta("e", (8,), device="cuda:1")], tp=1)
    assert analyze(run.trace()) == []


def test_tp_ranks_on_different_device_types_disagree() -> None:
    run = Run(pp_size=2, tp_size=2)
    run.attach([meta("e", (8,), device="cuda:2")], tp=0)
    run.attach([meta("e", (8,), device="cpu")], tp=1)
    run.extract([meta("e", (8,), device="cuda:0")], tp=0)
    run.extract([meta("e", (8,), device="cpu")], tp=1)
    (f,) = analyze(run.trace())
    assert f.kind is K.TP_DISAGREE
    assert "`e` float32[8] on cuda:2" in f.message and "on cpu" in f.message
