"""How a loader worker's events and stats travel to the process that started it, as JSON.

``pptrace.load.worker`` sends each event that is not a row of a cached shape, and each shape,
as compact JSON: every shared part (rank, tensors, tuples of keys, strings) once in a table,
and each event as a list of numbers and table indices; recorder stats field by field. No
pickle: nothing the worker sends can run code in the process that reads it.

    pack = Packer(); rows = [pack.event(ev) for ev in events]   # then send pack.tables
    unpack = Unpacker(builder, tables); events = [unpack.event(r) for r in rows]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, fields
from typing import Any

from pptrace.load.builder import TraceBuilder
from pptrace.model.records import Direction, Event, RankInfo, RecorderStats, TensorMeta

__all__ = ["FIELD_TABLES", "Packer", "Unpacker", "stats", "stats_json"]

_new_event = tuple.__new__

# How each of ``Event``'s fields travels, by name: "plain" as itself, "strings"/"tuples" as an
# index into a shared table, "ranks"/"tensors" likewise, "direction" as its value. A field added
# to ``Event`` without an entry here stops this module at import (and its test names it).
FIELD_TABLES: dict[str, str] = {
    "direction": "direction", "seq": "plain", "rank": "ranks", "start_ns": "plain",
    "mono_ns": "plain", "duration_ns": "plain", "thread_id": "plain", "thread_name": "strings",
    "subject_type": "strings", "subject_pp_capable": "plain", "tensors": "tensors",
    "keys_before": "tuples", "keys_after": "tuples", "returned_none": "plain",
    "error_type": "plain", "error_message": "plain", "inserted_before_error": "tuples",
    "dropped_before": "plain", "run_id": "strings", "extra": "tuples",
}
if set(FIELD_TABLES) != set(Event._fields):
    raise ImportError(
        "pptrace.load.worker: Event's fields and FIELD_TABLES differ: "
        f"{sorted(set(FIELD_TABLES) ^ set(Event._fields))}")
_PLAN = tuple(FIELD_TABLES[name] for name in Event._fields)


def _rank_json(rank: RankInfo) -> list[Any]:
    return list(asdict(rank).values())


def _tensors_json(tensors: tuple[TensorMeta, ...]) -> list[list[Any]]:
    return [list(m) for m in tensors]


def _tuple_json(items: tuple[Any, ...]) -> list[Any]:
    return [list(x) if isinstance(x, tuple) else x for x in items]


def _same(value: Any) -> Any:
    return value


_AS_JSON: dict[str, Callable[[Any], Any]] = {
    "ranks": _rank_json, "tensors": _tensors_json, "tuples": _tuple_json, "strings": _same}


class Packer:
    """Events as compact JSON: each shared part (rank, tensors, tuples of keys, strings) once,
    in a table, and each event as a list of numbers and table indices. Decoding one costs the
    receiving process about as much as building the event, far less than a schema decode."""

    def __init__(self) -> None:
        self.tables: dict[str, list[Any]] = {"ranks": [], "tensors": [], "tuples": [],
                                             "strings": []}
        self._index: dict[tuple[str, Any], int] = {}

    def _put(self, table: str, obj: Any) -> int:
        key = (table, obj)
        i = self._index.get(key)
        if i is None:
            rows = self.tables[table]
            i = self._index[key] = len(rows)
            rows.append(_AS_JSON[table](obj))
        return i

    def event(self, ev: Event) -> list[Any]:
        """One event as a list, field by field in ``Event``'s order."""
        out: list[Any] = []
        values: tuple[Any, ...] = ev
        for kind, value in zip(_PLAN, values, strict=True):
            if kind == "plain":
                out.append(value)
            elif kind == "direction":
                out.append(value.value)
            else:
                out.append(self._put(kind, value))
        return out


class Unpacker:
    """The receiving side of ``Packer``; shared parts go through the builder's interning."""

    def __init__(self, builder: TraceBuilder, tables: dict[str, list[Any]]) -> None:
        self.tables: dict[str, list[Any]] = {
            "ranks": [builder.intern_rank(RankInfo(*r)) for r in tables["ranks"]],
            "tensors": [builder.intern_tensors(tuple(map(_meta, ts))) for ts in tables["tensors"]],
            "tuples": [
                builder.intern_tuple(tuple(tuple(x) if isinstance(x, list) else x for x in t))
                for t in tables["tuples"]
            ],
            "strings": [builder.intern_str(t) for t in tables["strings"]],
        }

    def event(self, packed: list[Any]) -> Event:
        """The event a ``Packer.event`` list stands for (ValueError when it is malformed)."""
        values: list[Any] = []
        tables = self.tables
        for kind, value in zip(_PLAN, packed, strict=True):
            if kind == "plain":
                values.append(value)
            elif kind == "direction":
                values.append(_DIRECTIONS[value])
            else:
                values.append(tables[kind][value])
        event: Event = _new_event(Event, values)
        return event


_DIRECTIONS = {d.value: d for d in Direction}
_META_FIELDS = TensorMeta._fields


def _meta(values: list[Any]) -> TensorMeta:
    """A ``TensorMeta`` from its fields' values in order (as ``_tensors_json`` gave them)."""
    if len(values) != len(_META_FIELDS):
        raise ValueError("a tensor's fields do not match TensorMeta's")
    named = dict(zip(_META_FIELDS, values, strict=True))
    named["shape"] = tuple(named["shape"])
    return TensorMeta(**named)


def stats_json(stats: RecorderStats) -> dict[str, Any]:
    """Recorder stats field by field (not as span attributes: the schema's encoding may leave
    out what a resource carries)."""
    out = {f.name: getattr(stats, f.name) for f in fields(RecorderStats)}
    out["rank"] = asdict(stats.rank)
    out["sink_dropped"] = [list(item) for item in stats.sink_dropped]
    return out


def stats(values: dict[str, Any]) -> RecorderStats:
    """The ``RecorderStats`` a ``stats_json`` dict stands for (TypeError when malformed)."""
    named = dict(values)
    named["rank"] = RankInfo(**named["rank"])
    named["sink_dropped"] = tuple((str(k), int(n)) for k, n in named["sink_dropped"])
    return RecorderStats(**named)
