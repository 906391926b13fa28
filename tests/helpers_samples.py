"""Helpers for the sample-pipeline tests: run the pipeline, read its per-rank traces back.

Traces are read with plain ``json`` and ``pptrace.model.schema.attributes_to_event`` (no loader), so
these tests check what the rank processes wrote, independently of the analyzer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pptrace_samples.launch import RunResult, run_pipeline
from pptrace_samples.options import PipelineOptions

from pptrace.model import schema
from pptrace.model.records import Direction, Event

__all__ = ["TraceFiles", "any_value", "finding_kinds", "read_traces", "run_sample"]

# Generous: a rank that hangs is killed by the launcher long before the test times out.
RUN_TIMEOUT = 90.0


def any_value(value: Mapping[str, Any]) -> Any:
    """Decode an OTLP/JSON ``AnyValue``."""
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [any_value(v) for v in value["arrayValue"].get("values", [])]
    return None


class TraceFiles:
    """The events each rank wrote, keyed by global rank, in recording order."""

    def __init__(self, by_rank: dict[int, list[Event]], files: list[str]) -> None:
        self.by_rank = by_rank
        self.files = files

    def events(self, rank: int, direction: Direction | None = None) -> list[Event]:
        """One rank's events (optionally one direction), ordered by sequence number."""
        evs = [e for e in self.by_rank.get(rank, []) if direction in (None, e.direction)]
        return sorted(evs, key=lambda e: (e.direction.value, e.seq))

    def errors(self) -> dict[int, list[Event]]:
        """The events that raised, per rank."""
        out: dict[int, list[Event]] = {}
        for rank, evs in self.by_rank.items():
            failed = [e for e in evs if not e.ok]
            if failed:
                out[rank] = failed
        return out


def read_traces(trace_dir: str) -> TraceFiles:
    """Read every ``*.otlp.jsonl`` file in ``trace_dir``."""
    by_rank: dict[int, list[Event]] = {}
    files = sorted(f for f in os.listdir(trace_dir) if f.endswith(".otlp.jsonl"))
    for name in files:
        with open(os.path.join(trace_dir, name), encoding="ascii") as fh:
            for line in fh:
                doc = json.loads(line)
                for rs in doc.get("resourceSpans", []):
                    res = {a["key"]: any_value(a["value"])
                           for a in rs.get("resource", {}).get("attributes", [])}
                    for ss in rs.get("scopeSpans", []):
                        for span in ss.get("spans", []):
                            if span["name"] not in (schema.SPAN_ATTACH, schema.SPAN_EXTRACT):
                                continue
                            attrs = {a["key"]: any_value(a["value"]) for a in span["attributes"]}
                            ev = schema.attributes_to_event(attrs, int(span["startTimeUnixNano"]),
                                                            resource=res, name=span["name"])
                            assert ev.rank.rank is not None
                            by_rank.setdefault(ev.rank.rank, []).append(ev)
    return TraceFiles(by_rank, files)


def run_sample(out_dir: str, **options: Any) -> tuple[RunResult, TraceFiles]:
    """Run the sample pipeline and read back what its ranks wrote."""
    result = run_pipeline(PipelineOptions(out_dir=out_dir, **options), timeout=RUN_TIMEOUT)
    return result, read_traces(out_dir)


def finding_kinds(trace_dir: str) -> set[str]:
    """The kinds of finding pptrace's analyzer reports for a run's traces."""
    from pptrace.analyze.analyzer import analyze
    from pptrace.load.loader import load_paths

    return {f.kind.value for f in analyze(load_paths([trace_dir]))}
