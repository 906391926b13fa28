"""A process's message records sorted out once (``message_sides.sort_out``): every record in its
list, each list in seq order, and whether its oldest records were cut read from each counter's
first seq (sends, receives by either phase, broadcast sends, broadcast receives)."""

from __future__ import annotations

import random

import pytest

from pptrace.analyze.message_sides import cut_at_start, sort_out
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import RankInfo, RecorderStats
from pptrace.model.trace import ProcessTrace

RANK = RankInfo(rank=0, world_size=2, pp_rank=0, pp_size=2, host="h", pid=1)
SEND, RECV = MessageOp.SEND, MessageOp.RECV


def _ev(op: MessageOp, seq: int, phase: str = "end", group: tuple[int, ...] = ()) -> MessageEvent:
    return MessageEvent(op=op, phase=phase, seq=seq, peer=1, group=group)


def _proc(messages: list[MessageEvent], stats: RecorderStats | None = None) -> ProcessTrace:
    return ProcessTrace(rank=RANK, events=(), stats=stats, messages=tuple(messages))


def test_every_record_lands_in_its_list_in_seq_order() -> None:
    msgs = ([_ev(SEND, s) for s in range(5)] + [_ev(RECV, s, "begin") for s in range(4)]
            + [_ev(RECV, s) for s in range(4)] + [_ev(SEND, s, group=(0, 1)) for s in range(3)]
            + [_ev(RECV, s, group=(1, 0)) for s in range(2)])
    random.Random(7).shuffle(msgs)
    side = sort_out(3, _proc(msgs), "run", "p:")
    assert [m.seq for m in side.sends] == list(range(5))
    assert [m.seq for m in side.ends] == list(range(4)) and sorted(side.begins) == [0, 1, 2, 3]
    assert [m.seq for m in side.bsends] == list(range(3))
    assert [m.seq for m in side.bends] == [0, 1] and not side.bbegins
    assert (side.index, side.run, side.prefix, side.cut) == (3, "run", "p:", False)


@pytest.mark.parametrize("messages, cut", [
    ([_ev(SEND, 0), _ev(SEND, 1)], False),
    ([_ev(SEND, 2), _ev(SEND, 3)], True),  # sends from #2 on
    ([_ev(RECV, 1, "begin"), _ev(RECV, 1)], True),  # receives from #1 on
    ([_ev(RECV, 0, "begin"), _ev(RECV, 1)], False),  # receive #0 began: kept from #0
    ([_ev(RECV, 1, "begin"), _ev(RECV, 0)], False),  # receive #0 ended: kept from #0
    ([_ev(SEND, 0), _ev(SEND, 4, group=(0, 1))], True),  # broadcasts count apart
    ([_ev(SEND, 0), _ev(RECV, 2, "begin", group=(1, 0))], True),
    ([], False),
])
def test_a_process_is_cut_when_a_counter_starts_above_zero(
        messages: list[MessageEvent], cut: bool) -> None:
    assert sort_out(0, _proc(messages), "", "").cut is cut
    assert cut_at_start(_proc(messages)) is cut


@pytest.mark.parametrize("field", ["rotated_segments", "overwritten"])
def test_deleted_segments_or_an_overwritten_ring_cut_it_too(field: str) -> None:
    stats = RecorderStats(rank=RANK, time_ns=1, recorded=0, exported=0, **{field: 1})
    assert sort_out(0, _proc([_ev(SEND, 0)], stats), "", "").cut
    assert sort_out(0, _proc([], stats), "", "").cut  # it kept none at all
