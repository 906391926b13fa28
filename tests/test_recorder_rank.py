"""The rank is learned during the first transport calls, and kept after the process group ends."""

from __future__ import annotations

import pptrace.record.engine as engine
from pptrace.model.config import Config
from pptrace.model.records import RankInfo
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output
from tests.helpers_recorder import MemorySink

UP = RankInfo(rank=1, world_size=2, pp_rank=1, pp_size=2, host="h", pid=1)
DOWN = RankInfo(host="h", pid=1)


def test_a_rank_seen_during_a_call_survives_the_end_of_the_process_group() -> None:
    group_up = [False]
    asked: list[bool] = []

    def provider() -> tuple[RankInfo, bool]:
        asked.append(group_up[0])
        return (UP, True) if group_up[0] else (DOWN, False)

    sink = MemorySink()
    rec = Recorder(Config(), sink_factory=lambda _r: sink, rank_provider=provider)
    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, rec)
    tensors: dict[str, object] = {}
    attach(tensors, None)  # before init_process_group: not final, keep asking
    assert rec.rank_pending
    group_up[0] = True
    attach(tensors, Output(1))
    assert not rec.rank_pending  # final: no more discovery on the caller's path
    calls = len(asked)
    extract(tensors, Observer())
    assert len(asked) == calls
    group_up[0] = False  # destroy_process_group before the (exit) flush
    rec.flush()
    assert sink.events and {e.rank for e in sink.events} == {UP}


def test_discovery_stops_trying_on_the_callers_path_after_a_few_calls() -> None:
    asked: list[int] = []

    def provider() -> tuple[RankInfo, bool]:
        asked.append(1)
        return DOWN, False  # a single process: never final

    rec = Recorder(Config(), sink_factory=lambda _r: MemorySink(), rank_provider=provider)
    attach, _ = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                               engine.pop_auxiliary_output_from_pp_tensors, rec)
    for _ in range(20):
        attach({}, None)
    assert not rec.rank_pending
    assert len(asked) == 8
