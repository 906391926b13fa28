"""The native library's span renderer (``native_render.cpp``) writes what FileSink's Python
loop writes, byte for byte, and leaves to that loop every raw it is not sure of.

Each test hands the same raws to two FileSinks with the same id prefix: one whose converter
carries the library's ``render``, one whose converter carries none. Their lines, their span
counts and their id counters must come out equal; a proxy around ``render`` counts the raws it
wrote, so that a test cannot pass with the renderer taking nothing.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from pptrace.export.file_sink import SPANS_PER_LINE, FileSink
from pptrace.export.spans import process_resource
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction
from pptrace.record.convert import Converter, RawEvents
from pptrace.record.recorder import Recorder
from tests.doubles import Observer, Output
from tests.helpers_recorder import RANK, MemorySink, drive, recorder, wrapped
from tests.test_native import HAS_COMPILER, _reset, built  # noqa: F401  (built: a fixture)

pytestmark = [pytest.mark.slow,  # the library is compiled (about 20 s) once a machine
              pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the library")]


@pytest.fixture
def render(built: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:  # noqa: F811
    """The library's renderer, the library loaded in this process for one test."""
    from pptrace.record import native

    monkeypatch.setenv("PPTRACE_NATIVE_DIR", str(built))
    _reset()
    module = native.reader()
    assert module is not None, native.status().reason
    yield module.render
    _reset()


class Counting:
    """``render`` that counts the raws it wrote and the calls that wrote none."""

    def __init__(self, render: Callable[..., Any]) -> None:
        self.render, self.wrote, self.stopped = render, 0, 0

    def __call__(self, raws: Any, start: int, *rest: Any) -> Any:
        out = self.render(raws, start, *rest)
        self.wrote += out[0] - start
        self.stopped += out[0] == start
        return out


def both(tmp: Path, rec: Recorder, chunks: Sequence[list[Any]], render: Callable[..., Any]
         ) -> tuple[list[str], Counting]:
    """The lines of ``chunks`` (one export each) written with the renderer and without, checked
    equal (lines, span counts, failures, ids drawn); the lines and the renderer's counts."""
    counting = Counting(render)
    out = []
    for name, fast in (("c", counting), ("py", None)):
        sink = FileSink(str(tmp / f"{name}.jsonl"), process_resource(RANK, "run"), "1")
        sink._prefix = 0xFEEDFACE_0000_0001  # the same ids on both sides
        convert = Converter(rec, RANK)
        convert.render = fast
        lines, spans, failed = [], 0, 0
        for chunk in chunks:
            events = RawEvents(chunk, convert, lambda exc: None)
            written, count = sink._raw_lines(events)
            lines += written
            spans += count
            failed += events.failed
        out.append((lines, spans, failed, sink._count(), sink.templates_built))
        sink.shutdown(1.0)
    assert out[0] == out[1]
    assert out[0][1] + out[0][2] == sum(map(len, chunks))  # every raw written or counted
    return out[0][0], counting


def raws_of(rec: Recorder) -> list[Any]:
    raws = list(rec._buf)
    rec._buf.clear()
    return raws


def test_the_wrappers_raws_are_written_as_python_writes_them(
        tmp_path: Path, render: Callable[..., Any]) -> None:
    # The C wrapper's raws (packed items), then the Python wrapper's (flat items), over lines.
    chunks = []
    for native_on in (True, False):
        rec = recorder(Config(native=native_on), MemorySink())
        attach, extract = wrapped(rec)
        for n in (1, 4, 2, 3):
            drive(attach, extract, pairs=SPANS_PER_LINE + 7, n=n)
        raws = raws_of(rec)
        assert {type(r[9]) for r in raws} == ({bytes} if native_on else {list})
        chunks += [raws[:50], raws[50:]]
        rec.shutdown(1.0)
    lines, counting = both(tmp_path, rec, chunks, render)
    assert len(lines) > 8
    # Each shape's first two events are the Python loop's (seen, then its template made); the
    # renderer writes the rest: 16 shapes (4 sizes, attach and extract, packed and flat items).
    assert counting.wrote == sum(map(len, chunks)) - 2 * 16


class Renamed(threading.Thread):
    """A thread whose ident and name are whatever the test sets."""

    def __init__(self, ident: Any, name: Any) -> None:
        super().__init__(name="renamed")
        self.fake_ident, self.fake_name = ident, name

    @property  # type: ignore[override]
    def ident(self) -> Any:
        return self.fake_ident

    @property  # type: ignore[override]
    def name(self) -> Any:
        return self.fake_name

    @name.setter
    def name(self, value: Any) -> None:
        pass


class BadEq(type):
    """A subject type equal to nothing it is compared with: its lookup raises."""

    def __eq__(cls, other: object) -> bool:
        if cls is other:
            return True
        raise ValueError("no comparing this type")

    def __hash__(cls) -> int:
        return 42


class OddSubject(metaclass=BadEq):
    pass


class OtherOdd(metaclass=BadEq):  # the same hash: a lookup of one compares it with the other
    pass


class Key(str):
    pass


def hand_raws(count: int, seed: int) -> list[Any]:
    """Raws of every form the renderer takes or leaves, in a random order."""
    meta = (torch.Size([2, 3]), torch.float32, torch.device("cpu"), True)
    here = threading.current_thread()
    before = ("next_token_ids",)
    after = before + (PREFIX + "a", PREFIX + "b")
    flat = [PREFIX + "a", *meta, PREFIX + "b", *meta]

    def raw(number: int, **change: Any) -> tuple[Any, ...]:
        fields: dict[str, Any] = {
            "direction": Direction.ATTACH, "seq": number,
            "wall": 1_700_000_000_000_000_000 + number, "mono": 10_000 + number,
            "duration": 300 + number, "thread": here, "subject": Output,
            "before": before, "after": after, "items": list(flat), "returned_none": True,
            "error": None, "dropped": 0, "fingerprints": None}
        assert change.keys() <= fields.keys()
        fields.update(change)
        return tuple(fields.values())

    forms: list[dict[str, Any]] = [
        {}, {}, {},  # the common form, most often
        {"direction": Direction.EXTRACT, "subject": Observer, "after": before},
        {"dropped": 4}, {"dropped": 2**61},  # drops: a shape of their own
        {"thread": threading.get_ident()},  # an int ident, named from the flush's threads
        {"thread": 1234567},  # an int ident of no thread alive: the name ""
        {"thread": Renamed(None, "no ident yet")}, {"thread": Renamed(77, "seventy-seven")},
        {"thread": Renamed(77.0, "float ident")},
        {"items": ((PREFIX + "a", meta),)},  # the general form: Python's
        {"items": [PREFIX + "a", *meta, Key(PREFIX + "b"), *meta]},  # a str subclass key
        {"before": (Key("next_token_ids"),), "after": (Key("next_token_ids"),)},
        {"before": ["next_token_ids"]},  # a list: unhashable, Python's conversion
        {"error": ("RuntimeError", "boom")}, {"fingerprints": ()}, {"fingerprints": ("b2:1",)},
        {"returned_none": False}, {"returned_none": 1}, {"seq": True}, {"seq": -1},
        {"mono": 2**62}, {"wall": 2**62 - 1, "duration": 2**62 - 1},
        {"subject": OddSubject}, {"subject": OtherOdd},
        {"subject": type(None), "returned_none": False},
    ]
    rng = random.Random(seed)
    out: list[Any] = [rng.choice(forms) for _ in range(count)]
    made = [raw(i, **form) for i, form in enumerate(out)]
    made[rng.randrange(count)] = ("not", "a", "raw")  # what a bug in a wrapper would leave
    return made


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_hand_made_raws_of_every_form(tmp_path: Path, render: Callable[..., Any],
                                      seed: int) -> None:
    rec = Recorder(Config())
    raws = hand_raws(600, seed)
    cuts = sorted(random.Random(seed).sample(range(1, len(raws)), 5))
    chunks = [raws[a:b] for a, b in zip([0, *cuts], [*cuts, len(raws)], strict=True)]
    lines, counting = both(tmp_path, rec, chunks, render)
    assert counting.wrote > 100 and counting.stopped > 20
    assert any("seventy-seven" in line for line in lines)


def test_two_threads_in_turn(tmp_path: Path, render: Callable[..., Any]) -> None:
    """The renderer reads a thread object's ident and name once for a run of its raws: raws of
    two threads in turn are each named by their own."""
    rec = recorder(Config(), MemorySink())
    attach, extract = wrapped(rec)
    done = threading.Event()

    def other() -> None:
        drive(attach, extract, pairs=3)
        done.set()

    for i in range(12):
        drive(attach, extract, pairs=2)
        if i % 3 == 0:
            done.clear()
            worker = threading.Thread(target=other, name=f"worker-{i}")
            worker.start()
            worker.join()
    raws = raws_of(rec)
    rec.shutdown(1.0)
    lines, counting = both(tmp_path, rec, [raws], render)
    assert counting.wrote > len(raws) // 2
    assert all(f"worker-{i}" in "".join(lines) for i in (0, 3, 6, 9))


def test_what_python_code_raises_inside_it(tmp_path: Path, render: Callable[..., Any]) -> None:
    """An Exception from a thread's name is Python's to handle (the raw goes the Python way,
    which fails its conversion and counts it); anything else propagates, as from Python."""
    rec = Recorder(Config())

    class Failing(threading.Thread):
        def __init__(self, error: type[BaseException]) -> None:
            super().__init__()
            self.error = error

        @property  # type: ignore[override]
        def name(self) -> str:
            raise self.error("no name")

        @name.setter
        def name(self, value: str) -> None:
            pass

    good = hand_raws(40, 9)
    base = next(r for r in good if len(r) == 14)
    failing = base[:5] + (Failing(LookupError),) + base[6:]
    both(tmp_path, rec, [good[:20] + [failing] + good[20:]], render)
    interrupting = base[:5] + (Failing(KeyboardInterrupt),) + base[6:]
    for fast in (render, None):
        sink = FileSink(str(tmp_path / "k.jsonl"), process_resource(RANK, "run"), "1")
        convert = Converter(rec, RANK)
        convert.render = fast
        with pytest.raises(KeyboardInterrupt):
            sink._raw_lines(RawEvents(good * 3 + [interrupting], convert, lambda exc: None))
        sink.shutdown(1.0)


def test_it_refuses_arguments_of_another_form(render: Callable[..., Any]) -> None:
    ctx = (iter(range(1, 10)).__next__, 1, "[", "]", {}, Direction.ATTACH, Direction.EXTRACT, 64)
    assert render([], 0, {}, ctx, ["["], [], 0) == (0, 0, 0)
    for args in (
        ((), 0, {}, ctx, [], [], 0),  # not a list of raws
        ([], 0, [], ctx, [], [], 0),  # templates not a dict
        ([], 0, {}, ctx[:7], [], [], 0),  # a short ctx
        ([], 0, {}, ctx, [], [], "0"),
        ([], 0, {}, ctx, [], [], 0, "extra"),
    ):
        with pytest.raises(TypeError):
            render(*args)
    with pytest.raises(ValueError, match="out of its range"):
        render([], -1, {}, ctx, [], [], 0)
    with pytest.raises(ValueError, match="out of its range"):
        render([], 0, {}, ctx[:7] + (0,), [], [], 0)


def test_a_template_it_cannot_write_is_left_before_any_id_is_drawn(
        render: Callable[..., Any]) -> None:
    """A template whose pieces are not ASCII (never FileSink's: its JSON escapes everything) or
    that is not (render, pieces, holes) is the Python loop's: nothing written, no id drawn."""
    from pptrace.model.raw import RAW_FIELDS

    fields = dict.fromkeys(RAW_FIELDS)
    fields.update(direction=Direction.ATTACH, seq=1, wall_ns=10, mono_ns=20, duration_ns=3,
                  thread=5, subject=int, keys_before=(), keys_after=("a",), items=b"",
                  returned_none=True, dropped=0)
    raw = tuple(fields[name] for name in RAW_FIELDS)
    key = ((True, 5, "main", int, (), ("a",), b"", True, None), False)
    drawn = iter(range(1, 100))
    ctx = (drawn.__next__, 1, "[", "]", {5: "main"}, Direction.ATTACH, Direction.EXTRACT, 64)
    for template in ((None, ("é", "|"), bytes([4])), (None, ("<", "|"), bytes([9])),
                     (("<", "|"), bytes([4])), (None, ("<", "|", ">"), bytes([4]))):
        pieces: list[str] = ["["]
        assert render([raw], 0, {key: template}, ctx, pieces, [], 0) == (0, 0, 0), template
        assert pieces == ["["]
    assert next(drawn) == 1  # no id drawn for any of them
    pieces = ["["]
    assert render([raw], 0, {key: (None, ("<", ">"), bytes([4]))}, ctx, pieces, [], 0) == (
        1, 1, 0)
    assert pieces == ["[", "<1>"] and next(drawn) == 3
