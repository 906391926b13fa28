"""Attach and extract called from several threads at once lose and interleave nothing.

The engine may call extract on a copy-stream or worker thread while another thread attaches.
Every call must be recorded once, sequence numbers must stay unique and gap-free per direction,
and each event must describe its own call (its thread's tensor names and dict keys), while the
flush thread drains the buffer concurrently.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction, Event
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output
from tests.helpers_reliability import (
    SENTINEL,
    ListSink,
    file_sink_factory,
    make_recorder,
    read_trace_file,
    trace_files,
    transport,
)

THREADS = 6
PAIRS = 150
ROUND = 10  # pairs per thread between two barriers: every round holds every thread's calls


@pytest.fixture(autouse=True)
def _fast_switching() -> Iterator[None]:
    # Switch threads every few microseconds so that calls really interleave.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def _hammer(attach: object, extract: object) -> dict[int, int]:
    """Run THREADS threads of PAIRS attach/extract pairs; return {thread ident: index}.

    The threads meet at a barrier every ROUND pairs, so that however starved of CPU the machine
    is, no thread can make all its calls before the others start: the calls interleave by
    construction (checked on the order the calls returned in), never by luck."""
    barrier = threading.Barrier(THREADS)
    idents: dict[int, int] = {}
    errors: list[BaseException] = []
    returned: list[int] = []  # list.append is atomic: the order the attach calls returned in
    tensor = torch.zeros(2)

    def work(i: int) -> None:
        try:
            idents[threading.get_ident()] = i
            for j in range(PAIRS):
                if j % ROUND == 0:
                    barrier.wait(60)
                d = {"next_token_ids": tensor, f"own{i}": tensor}
                attach(d, Output({f"t{i}": tensor, f"u{i}_{j % 3}": tensor}))  # type: ignore[operator]
                returned.append(i)
                assert extract(d, Observer(SENTINEL)) is SENTINEL  # type: ignore[operator]
                assert list(d) == ["next_token_ids", f"own{i}"]
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]
    switches = sum(a != b for a, b in zip(returned, returned[1:], strict=False))
    assert switches >= (PAIRS // ROUND) * (THREADS - 1), "the threads did not interleave"
    return idents


def _check(events: list[Event], idents: dict[int, int], dropped: int) -> None:
    """Each event describes its own call, seqs are unique and in call order per thread, and
    the seqs missing are exactly the events the recorder counted as dropped (a recorder starved
    of CPU sheds load by its overload pacing and counts it: gaps then, but none uncounted)."""
    total = THREADS * PAIRS
    missing = 0
    for direction in Direction:
        seqs = sorted(e.seq for e in events if e.direction is direction)
        assert len(set(seqs)) == len(seqs), f"{direction.value}: seq numbers repeated"
        assert set(seqs) <= set(range(total)), f"{direction.value}: seq numbers out of range"
        missing += total - len(seqs)
    assert missing == dropped, f"{missing} events missing, {dropped} counted as dropped"
    per_thread: Counter[tuple[int, Direction]] = Counter()
    last_seq: dict[tuple[int, Direction], int] = {}
    for e in sorted(events, key=lambda e: e.seq):
        i = idents[e.thread_id]
        per_thread[(i, e.direction)] += 1
        # The event describes its own thread's call, never a neighbour's.
        assert e.names[0] == f"t{i}" and e.names[1].startswith(f"u{i}_"), (i, e.names)
        assert e.keys_before[:2] == ("next_token_ids", f"own{i}")
        if e.direction is Direction.ATTACH:
            assert e.keys_after == e.keys_before + tuple(PREFIX + n for n in e.names)
        else:
            assert e.keys_after == ("next_token_ids", f"own{i}")
        # Within one thread, sequence numbers follow call order.
        key = (i, e.direction)
        assert e.seq > last_seq.get(key, -1)
        last_seq[key] = e.seq
    if dropped == 0:
        assert set(per_thread.values()) == {PAIRS}


def test_threads_in_stream_mode_with_concurrent_flushes() -> None:
    mod = transport()
    sink = ListSink()
    rec = make_recorder(Config(flush_interval=0.001), sink).start()
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    idents = _hammer(attach, extract)
    rec.shutdown(timeout=10.0)
    assert rec.recorded == 2 * THREADS * PAIRS and rec.internal_errors == 0
    # Nothing lost uncounted.
    assert rec.recorded == rec.exported + rec.dropped == len(sink.events) + rec.dropped
    assert sink.stats[-1].exported == rec.exported
    _check(list(sink.events), idents, rec.dropped)


def test_threads_with_the_file_sink(tmp_path: Path) -> None:
    mod = transport()
    config = Config(trace_dir=str(tmp_path), flush_interval=0.005)
    rec = make_recorder(config, sink_factory=file_sink_factory(config)).start()
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    idents = _hammer(attach, extract)
    rec.shutdown(timeout=20.0)
    (path,) = trace_files(config.trace_dir)
    events, stats, bad = read_trace_file(path)
    assert not bad
    last = stats[-1]
    assert last.recorded == 2 * THREADS * PAIRS and last.final
    # Nothing lost uncounted, and the file holds what was exported.
    assert last.recorded == last.exported + last.dropped and len(events) == last.exported
    _check(events, idents, last.dropped)


def test_threads_in_flight_mode_dump_a_consistent_ring() -> None:
    mod = transport()
    sink = ListSink()
    size = 500
    rec = make_recorder(Config(mode="flight", flight_size=size, flush_interval=0.001), sink)
    rec.start()
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    idents = _hammer(attach, extract)
    rec.request_dump()
    rec.shutdown(timeout=10.0)
    total = 2 * THREADS * PAIRS
    assert len(sink.events) == size
    assert sink.stats[-1].overwritten == total - size  # what the ring lost is counted
    seqs = Counter((e.direction, e.seq) for e in sink.events)
    assert max(seqs.values()) == 1
    for e in sink.events:
        assert e.names[0] == f"t{idents[e.thread_id]}"
