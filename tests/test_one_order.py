"""One order of processes for every display: the grid, the message screen, Perfetto's tracks.

``RankInfo.layout_order`` (PP stage, TP rank, global rank; unknown last) is the rule; each
display adds only its own tie-breaker. The three once each wrote the rule out on its own.
"""

from __future__ import annotations

from pptrace_tui.index import TraceIndex
from pptrace_tui.message_index import MessageIndex

from pptrace.model.records import RankInfo
from pptrace.model.trace import Trace
from pptrace.report.perfetto import to_chrome_trace
from tests.helpers_analyze import Run, meta, mt


def test_unknown_places_sort_last() -> None:
    known = RankInfo(rank=5, pp_rank=1, tp_rank=0)
    assert known.layout_order() == (1, 0, 5)
    assert RankInfo(rank=0).layout_order() > known.layout_order()  # no PP stage: after stages
    assert RankInfo(pid=9).layout_order() == (1 << 30,) * 3


def test_the_grid_the_message_screen_and_perfetto_list_processes_alike() -> None:
    run = Run(pp_size=2, tp_size=2)
    run.step([meta("scores")])
    run.message("output", [mt("next_token_ids", (4,), "int64")], frm=1, to=0)
    trace = run.trace()
    trace = Trace(processes=tuple(reversed(trace.processes)))  # not the loader's order
    ranks = [p.rank.rank for p in trace.processes]

    grid = list(dict.fromkeys(ranks[row.process] for row in TraceIndex.build(trace, []).rows))
    screen = [ranks[row.process] for row in MessageIndex.build(trace, []).rows]
    doc = to_chrome_trace(trace, [])
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e.get("name") == "process_name"}
    tracks = [int(names[e["pid"]].split()[1]) for e in sorted(
        (e for e in doc["traceEvents"] if e.get("name") == "process_sort_index"),
        key=lambda e: e["args"]["sort_index"])]
    assert grid == screen == tracks == [0, 1, 2, 3]
