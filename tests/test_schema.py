"""The span schema's codec: ``event_to_attributes`` and ``attributes_to_event`` are inverses, and a
bad or foreign span is refused with one line naming where and what."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pptrace.model import schema
from pptrace.model.errors import SchemaVersionError, TraceInputError
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta

INT64 = st.integers(min_value=0, max_value=2**63 - 1)
SMALL = st.integers(min_value=0, max_value=2**20)
TEXT = st.text(max_size=12)
OPT = st.one_of(st.none(), st.integers(min_value=0, max_value=1024))

ranks = st.builds(RankInfo, rank=OPT, world_size=OPT, pp_rank=OPT, pp_size=OPT, tp_rank=OPT,
                  tp_size=OPT, host=TEXT, pid=SMALL)

# Names as the recorder writes them: text, or the repr() of a non-str name ("7", "None", "b'a'").
names = st.one_of(TEXT, st.sampled_from(["7", "None", "b'a'", "('t', 1)", ""]))
tensor_metas = st.builds(
    TensorMeta,
    name=names,
    key=names.map(lambda n: PREFIX + n),
    shape=st.lists(st.integers(min_value=0, max_value=4096), max_size=4).map(tuple),
    dtype=st.sampled_from(["float32", "int64", "bool", "list", "numpy.ndarray", "NoneType"]),
    device=st.sampled_from(["cpu", "cuda:0", "cuda:7", "meta", ""]),
    nbytes=SMALL,
    contiguous=st.booleans(),
    is_tensor=st.booleans(),
    fingerprint=st.one_of(st.none(), st.text(min_size=1, max_size=20)),
    sliced=st.just(False),  # an attach or extract sees whole tensors: TP slices are messages'
)


@st.composite
def events(draw: st.DrawFn) -> Event:
    failed = draw(st.booleans())
    return Event(
        direction=draw(st.sampled_from(Direction)),
        seq=draw(SMALL),
        rank=draw(ranks),
        start_ns=draw(INT64),
        mono_ns=draw(INT64),
        duration_ns=draw(SMALL),
        thread_id=draw(INT64),
        thread_name=draw(TEXT),
        subject_type=draw(TEXT),
        subject_pp_capable=draw(st.one_of(st.none(), st.booleans())),
        tensors=tuple(draw(st.lists(tensor_metas, max_size=6))),
        keys_before=tuple(draw(st.lists(TEXT, max_size=5))),
        keys_after=tuple(draw(st.lists(TEXT, max_size=5))),
        returned_none=draw(st.booleans()),
        error_type=draw(TEXT) if failed else None,
        error_message=draw(st.text(max_size=40)) if failed else None,
        inserted_before_error=tuple(draw(st.lists(TEXT, max_size=3))) if failed else (),
        dropped_before=draw(SMALL),
        run_id=draw(TEXT),
        extra=tuple(sorted(draw(st.dictionaries(TEXT, TEXT, max_size=3)).items())),
    )


@settings(max_examples=200, deadline=None)
@given(events())
def test_event_round_trip(event: Event) -> None:
    attrs = schema.event_to_attributes(event)
    assert attributes_are_otel_values(attrs)
    back = schema.attributes_to_event(attrs, start_ns=event.start_ns,
                                      end_ns=event.start_ns + event.duration_ns)
    assert back == event


#: Per-sink losses as RecorderStats holds them: sorted by sink name, one entry per sink.
SINK_DROPPED = st.dictionaries(st.sampled_from(["otlp", "file", "jaeger_2"]), SMALL).map(
    lambda d: tuple(sorted(d.items())))


@settings(max_examples=100, deadline=None)
@given(st.builds(RecorderStats, rank=ranks, time_ns=INT64, recorded=SMALL, exported=SMALL,
                 dropped=SMALL, overwritten=SMALL, internal_errors=SMALL, export_errors=SMALL,
                 mode=st.sampled_from(["stream", "flight"]), run_id=TEXT, final=st.booleans(),
                 sink_dropped=SINK_DROPPED))
def test_stats_round_trip(stats: RecorderStats) -> None:
    assert schema.attributes_to_stats(schema.stats_to_attributes(stats)) == stats


def test_a_sinks_losses_are_its_own_attribute_not_dropped() -> None:
    stats = RecorderStats(rank=RankInfo(pid=1), time_ns=1, recorded=5, exported=5,
                          final=True, sink_dropped=(("otlp", 5),))
    attrs = schema.stats_to_attributes(stats)
    assert attrs[schema.S_DROPPED] == 0 and attrs[schema.S_FINAL] is True
    assert attrs["pptrace.stats.sink.otlp.dropped"] == 5
    back = schema.attributes_to_stats(attrs)
    assert back.sink_lost("otlp") == 5 and back.sink_lost("file") == 0 and back.dropped == 0
    # A trace written before the marker existed reads as not final.
    del attrs[schema.S_FINAL]
    assert schema.attributes_to_stats(attrs).final is False


def attributes_are_otel_values(attrs: dict[str, Any]) -> bool:
    """Every value is one of OpenTelemetry's attribute types (homogeneous sequences included)."""
    for value in attrs.values():
        if isinstance(value, (str, bool, int, float)):
            continue
        assert isinstance(value, list), value
        assert len({type(v) for v in value}) <= 1, value
        assert all(isinstance(v, (str, bool, int, float)) for v in value), value
    return True


def test_schema_constants() -> None:
    assert schema.SCHEMA_VERSION == 3  # what the sinks write; PPTRACE_SCHEMA=1 or 2 keeps it
    assert schema.SPAN_NAMES == {"pptrace.attach", "pptrace.extract", "pptrace.recorder"}
    assert schema.span_name(Direction.ATTACH) == schema.SPAN_ATTACH
    assert schema.span_name(Direction.EXTRACT) == schema.SPAN_EXTRACT
    # The engine's own rank names, not pptrace's namespace.
    assert (schema.PP_RANK, schema.TP_RANK) == ("pp_rank", "tp_rank")


# --- refusing what cannot be read ---------------------------------------------------------------

EVENT = Event(direction=Direction.ATTACH, seq=4, rank=RankInfo(rank=1, pp_rank=1, pp_size=2),
              start_ns=10, mono_ns=20, duration_ns=5,
              tensors=(TensorMeta(name="a", key=PREFIX + "a", shape=(2,), dtype="float32",
                                  device="cpu", nbytes=8),))


def decode_error(attrs: dict[str, Any]) -> str:
    with pytest.raises(SchemaVersionError) as info:
        schema.attributes_to_event(attrs, where="trace.jsonl:3: ")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("trace.jsonl:3: ")
    assert isinstance(info.value, TraceInputError)
    return message


@pytest.mark.parametrize("version", [schema.READ_VERSION + 1, 99, 0, -1])
def test_unknown_schema_version_is_one_line(version: int) -> None:
    attrs = schema.event_to_attributes(EVENT) | {schema.VERSION: version}
    message = decode_error(attrs)
    assert f"schema version {version} is not supported" in message
    assert "upgrade pptrace" in message


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        pytest.param(schema.VERSION, "1", "should be an integer, found str", id="version-str"),
        pytest.param(schema.SEQ, "4", "'pptrace.seq' should be an integer, found str", id="seq"),
        pytest.param(schema.SEQ, True, "should be an integer, found bool", id="seq-bool"),
        pytest.param(schema.DIRECTION, "sideways", "unknown direction 'sideways'",
                     id="direction"),
        pytest.param(schema.DIRECTION, 3, "should be a string, found int", id="direction-int"),
        pytest.param(schema.PP_RANK, 1.5, "'pp_rank' should be an integer, found float",
                     id="pp_rank-float"),
        pytest.param(schema.HOST, 7, "'pptrace.host' should be a string, found int", id="host"),
        pytest.param(schema.T_NBYTES, ["8"], "should be a list of int", id="nbytes-str"),
        pytest.param(schema.T_CONTIG, [1], "should be a list of bool", id="contiguous-int"),
        pytest.param(schema.T_KEYS, [], "has 0 items, expected 1", id="keys-length"),
        pytest.param(schema.T_NAMES, "a", "should be a list of str", id="names-scalar"),
        pytest.param(schema.T_SHAPES, ["2,x"], "bad tensor shape '2,x'", id="shape-text"),
        pytest.param(schema.RETURNED_NONE, "yes", "should be a boolean, found str",
                     id="returned-none"),
        pytest.param(schema.SUBJECT_PP, 1, "should be a boolean, found int", id="pp-capable"),
    ],
)
def test_wrong_attribute_types_are_one_line(key: str, value: Any, expected: str) -> None:
    attrs = schema.event_to_attributes(EVENT) | {key: value}
    assert expected in decode_error(attrs)


def test_missing_version_is_refused() -> None:
    attrs = schema.event_to_attributes(EVENT)
    del attrs[schema.VERSION]
    assert "'pptrace.schema_version' should be an integer, found NoneType" in decode_error(attrs)


def test_stats_with_a_future_version_is_refused() -> None:
    attrs = schema.stats_to_attributes(RecorderStats(rank=RankInfo(), time_ns=1))
    attrs[schema.VERSION] = schema.READ_VERSION + 1
    with pytest.raises(SchemaVersionError,
                       match=f"schema version {schema.READ_VERSION + 1} is not supported"):
        schema.attributes_to_stats(attrs)


# --- docs/schema.md documents exactly this schema ---------------------------------------------

SCHEMA_PAGE = Path(__file__).resolve().parent.parent / "docs" / "schema.md"
TYPE_NAMES = {str: "string", bool: "bool", int: "int", float: "double"}


def documented_tables() -> dict[str, dict[str, str]]:
    """``{heading: {attribute: type}}`` from the tables of the schema page."""
    section = SCHEMA_PAGE.read_text("utf-8")
    tables: dict[str, dict[str, str]] = {}
    heading = ""
    for line in section.splitlines():
        if line.startswith("## "):
            heading = line[3:]
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            for key in re.findall(r"`([^`]+)`", cells[0]):
                tables.setdefault(heading, {})[key] = cells[1]
    return tables


def type_name(value: Any) -> str:
    if isinstance(value, list):
        assert value, "use a sample where every array has an element"
        return TYPE_NAMES[type(value[0])] + "[]"
    return TYPE_NAMES[type(value)]


FULL_RANK = RankInfo(rank=1, world_size=2, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1,
                     host="h", pid=9)
FULL_EVENT = Event(
    direction=Direction.ATTACH, seq=0, rank=FULL_RANK, start_ns=1, mono_ns=2, duration_ns=3,
    thread_id=4, thread_name="MainThread", subject_type="m.Out", subject_pp_capable=True,
    tensors=(TensorMeta(name="a", key=PREFIX + "a", shape=(2,), dtype="float32", device="cpu",
                        nbytes=8, fingerprint="b2:00"),),
    keys_before=("next_token_ids",), keys_after=("next_token_ids", PREFIX + "a"),
    error_type="RuntimeError", error_message="m", inserted_before_error=(PREFIX + "a",),
    run_id="r", extra=(("tag", "v"),),
)


def test_the_schema_page_documents_every_event_attribute_with_its_type() -> None:
    documented = documented_tables()["Event span attributes (`pptrace.attach`, `pptrace.extract`)"]
    produced = {("pptrace.extra.<name>" if k.startswith(schema.EXTRA_PREFIX) else k): type_name(v)
                for k, v in schema.event_to_attributes(FULL_EVENT).items()}
    assert documented == produced


def test_the_schema_page_documents_every_stats_attribute_with_its_type() -> None:
    tables = documented_tables()
    documented = tables["Stats span attributes (`pptrace.recorder`)"]
    rank_keys = {schema.VERSION, schema.RUN_ID, schema.RANK, schema.WORLD_SIZE, schema.PP_RANK,
                 schema.PP_SIZE, schema.TP_RANK, schema.TP_SIZE, schema.HOST, schema.PID}
    sample = RecorderStats(rank=FULL_RANK, time_ns=1, sink_dropped=(("otlp", 1),), rotated=1,
                           rotated_segments=1)
    produced = {k.replace(".otlp.", ".<name>.") if k.startswith("pptrace.stats.sink.") else k:
                type_name(v) for k, v in schema.stats_to_attributes(sample).items()}
    # The shared ones are documented once, in the event table, and named in the stats prose.
    assert documented == {k: v for k, v in produced.items() if k not in rank_keys}
    assert rank_keys <= set(produced)


def test_the_schema_page_documents_the_span_names_and_resource() -> None:
    tables = documented_tables()
    assert set(tables["Spans"]) == schema.SPAN_NAMES
    from pptrace.export.spans import process_resource

    rank = dataclasses.replace(FULL_RANK, instance="0f" * 16)
    resource = dict(process_resource(rank, "r").attributes)
    ours = {k: type_name(resource[k]) for k in tables["Resource attributes (one set per process)"]}
    assert ours == tables["Resource attributes (one set per process)"]
    assert resource[schema.R_INSTANCE] == rank.instance
    sdk_defaults = {k for k in resource if k.startswith("telemetry.sdk.")}
    assert set(resource) - set(ours) <= sdk_defaults
