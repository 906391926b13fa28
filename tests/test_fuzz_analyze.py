"""Hostile but loadable traces into the analyzer and the reports.

Hypothesis builds events whose every field is schema-valid but otherwise arbitrary (odd rank
layouts, repeated or huge sequence numbers, negative times, empty or prefix-like names, engine
error messages quoting hostile names, shapes that overflow), writes them as OTLP JSON lines,
loads them, and runs ``analyze`` and both reports. Nothing may raise; the text report stays inert.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pptrace.analyze.analyzer import analyze
from pptrace.load.loader import load_paths
from pptrace.model.errors import TraceInputError
from pptrace.model.findings import Severity
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.report.text import render_text, to_json
from tests.helpers_analyze import write_otlp_lines
from tests.helpers_reliability import NAMES, events

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture(scope="module")
def scratch() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as d:
        yield d


def _check(directory: str) -> None:
    try:
        trace = load_paths([directory])
    except TraceInputError as exc:
        assert "\n" not in str(exc)
        return
    findings = analyze(trace)
    for sev in Severity:
        text = render_text(trace, findings, fail_on=sev)
        assert not CONTROL.search(text.replace("\n", "")), repr(text[:200])
        json.dumps(to_json(trace, findings, fail_on=sev))


@settings(max_examples=50, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(per_process=st.lists(st.lists(events(), max_size=8), min_size=1, max_size=3),
       stats=st.none() | st.integers(0, 2**40))
def test_analyze_and_report_survive_any_schema_valid_events(
    scratch: str, per_process: list[list[Event]], stats: int | None
) -> None:
    directory = os.path.join(scratch, "t")
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))
    for i, evs in enumerate(per_process):
        rs = None
        if stats is not None and evs:
            rs = RecorderStats(rank=evs[0].rank, time_ns=stats, recorded=stats, dropped=stats,
                               overwritten=stats, internal_errors=stats % 7)
        write_otlp_lines(os.path.join(directory, f"p{i}.jsonl"), evs, per_line=5, stats=rs)
    _check(directory)


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(pp_size=st.integers(1, 4), steps=st.lists(
    st.tuples(st.sampled_from(["ok", "orphan", "extra", "rename", "reshape", "dup-seq"]),
              st.lists(NAMES, min_size=1, max_size=3, unique=True)), max_size=12))
def test_analyze_survives_mangled_pipelines(scratch: str, pp_size: int,
                                            steps: list[tuple[str, list[str]]]) -> None:
    # A plausible PP run (last stage attaches, stage 0 extracts) with faults sprinkled in.
    last = RankInfo(rank=pp_size - 1, pp_rank=pp_size - 1, pp_size=pp_size, tp_rank=0,
                    tp_size=1, host="h", pid=2)
    first = RankInfo(rank=0, pp_rank=0, pp_size=pp_size, tp_rank=0, tp_size=1, host="h", pid=1)
    att: list[Event] = []
    ext: list[Event] = []
    for i, (fault, names) in enumerate(steps):
        metas = tuple(TensorMeta(name=n, key=PREFIX + n, shape=(2,), dtype="float32",
                                 device="cpu", nbytes=8) for n in names)
        t = 1_000 + i * 10
        if fault != "extra":
            att.append(Event(Direction.ATTACH, len(att), last, t, t, 1, tensors=metas))
        if fault == "orphan":
            continue
        got = metas
        if fault == "rename":
            got = tuple(TensorMeta(name=m.name + "_", key=m.key + "_") for m in metas)
        elif fault == "reshape":
            got = tuple(TensorMeta(name=m.name, key=m.key, shape=(3, 3)) for m in metas)
        seq = len(ext) - 1 if fault == "dup-seq" and ext else len(ext)
        ext.append(Event(Direction.EXTRACT, seq, first, t + 5, t + 5, 1, tensors=got,
                         returned_none=False))
    directory = os.path.join(scratch, "m")
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))
    write_otlp_lines(os.path.join(directory, "last.jsonl"), att)
    write_otlp_lines(os.path.join(directory, "first.jsonl"), ext)
    _check(directory)


@pytest.mark.parametrize("name", ["{", "}", "{0}", "{}", "{name}", "{0.__class__}"])
def test_braces_in_a_name_are_shown_literally(scratch: str, name: str) -> None:
    last = RankInfo(rank=1, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1, host="h", pid=2)
    first = RankInfo(rank=0, pp_rank=0, pp_size=2, tp_rank=0, tp_size=1, host="h", pid=1)
    sent = (TensorMeta(name=name, key=PREFIX + name, shape=(2,), dtype="float32", nbytes=8),)
    got = (TensorMeta(name=name, key=PREFIX + name, shape=(3,), dtype="float32", nbytes=12),)
    directory = os.path.join(scratch, "braces")
    os.makedirs(directory, exist_ok=True)
    write_otlp_lines(os.path.join(directory, "last.jsonl"),
                     [Event(Direction.ATTACH, 0, last, 100, 100, 1, tensors=sent)])
    write_otlp_lines(os.path.join(directory, "first.jsonl"),
                     [Event(Direction.EXTRACT, 0, first, 200, 200, 1, tensors=got,
                            returned_none=False)])
    findings = analyze(load_paths([directory]))
    assert any(f"`{name}` float32[2]" in f.message for f in findings), [
        f.message for f in findings]
