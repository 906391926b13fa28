"""The one line a process prints at exit when anything was lost: every loss, by whom.

``dropped`` is what no sink received; what the OTLP exporter lost after taking the events is its
own loss ("N lost by otlp"), which the trace file does not share. "0 dropped" is never the whole
line when a sink lost spans.
"""

from __future__ import annotations

import collections
import dataclasses
import time

import pytest

from pptrace.activation.startup import exit_message
from pptrace.model.config import Config
from pptrace.model.records import RecorderStats
from tests.helpers_recorder import RANK, MemorySink, drive, recorder, wrapped

WHO = "pptrace: rank 0 (pp 0/1, tp 0) pid {pid}: "


def stats(**counts: object) -> RecorderStats:
    return dataclasses.replace(RecorderStats(rank=RANK, time_ns=0, recorded=40), **counts)


@pytest.mark.parametrize(("counts", "causes", "line"), [
    ({}, {}, ""),
    ({"exported": 40, "overwritten": 3}, {}, ""),  # flight mode's ring: by design, not a loss
    ({"sink_dropped": (("otlp", 40),), "export_errors": 1}, {"exit timeout": 40},
     "40 events recorded, 0 dropped, 40 lost by otlp, 1 export errors, 0 internal errors "
     "(lost spans: 40 exit timeout)"),
    ({"sink_dropped": (("otlp", 40),)}, {}, "40 events recorded, 0 dropped, 40 lost by otlp, "
     "0 export errors, 0 internal errors (lost spans: see the log)"),
    ({"dropped": 5, "sink_dropped": (("otlp", 7),), "export_errors": 2},
     {"refused": 4, "exit timeout": 3},
     "40 events recorded, 5 dropped, 7 lost by otlp, 2 export errors, 0 internal errors "
     "(lost spans: 4 refused, 3 exit timeout)"),
    ({"dropped": 40, "export_errors": 1}, {"exit timeout": 40},
     "40 events recorded, 40 dropped, 1 export errors, 0 internal errors "
     "(lost spans: 40 exit timeout)"),
    ({"internal_errors": 1, "rotated": 12}, {}, "40 events recorded, 0 dropped, 12 deleted by "
     "rotation, 0 export errors, 1 internal errors (lost spans: see the log)"),
    ({"sink_dropped": (("otlp", 0),)}, {}, ""),
])
def test_the_exit_line_names_every_loss_and_its_sink(
    counts: dict[str, object], causes: dict[str, int], line: str
) -> None:
    got = exit_message(stats(**counts), collections.Counter(causes))
    assert got == (WHO.format(pid=RANK.pid) + line if line else "")


def test_an_otlp_loss_counted_by_the_recorder_reaches_the_exit_line() -> None:
    sink = MemorySink()
    rec = recorder(Config(exporters=("file",), flush_interval=0.05), sink).start()
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=10)
    rec.exporter_dropped(20, "exit timeout")  # what _Active.on_drop hears from the exporter
    deadline = time.monotonic() + 10
    while len(sink.events) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    rec.shutdown()
    final = rec.stats()
    assert final.dropped == 0 and final.sink_lost("otlp") == 20  # the file has every event
    line = exit_message(final, collections.Counter({"exit timeout": 20}))
    assert ", 0 dropped, 20 lost by otlp, " in line and line.startswith("pptrace: ")
    assert len(sink.events) == 20 and line.count("\n") == 0
