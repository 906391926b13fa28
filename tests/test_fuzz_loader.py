"""Hostile and broken input to the loader: random bytes, mutated real traces (wrong types, huge
numbers and strings, NaN), truncations, deep nesting, non-UTF-8.

The loader may only return a ``Trace`` (with counted problems) or raise ``TraceInputError`` with
one line naming the file (and the line, for a line that cannot be parsed). Anything else (a
RecursionError, a KeyError, an AssertionError, a traceback) is a bug. Hypothesis runs are bounded
(``max_examples``) so the file stays well under a minute.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers_reliability import write_good_trace

FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
MAX_MESSAGE = 2000  # a one-line message must not echo megabytes of input


@functools.lru_cache(maxsize=1)
def _good() -> tuple[bytes, ...]:
    with tempfile.TemporaryDirectory() as d:
        path = write_good_trace(d)
        with open(path, "rb") as f:
            return tuple(f.read().splitlines(keepends=True))


@pytest.fixture
def good_lines() -> list[bytes]:
    """The lines of a real trace file (3 pairs, one flush each, with their stats spans)."""
    return list(_good())


@pytest.fixture(scope="module")
def scratch() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as d:
        yield d


def check_load(path: str) -> Any:
    """Load ``path``; assert the only outcomes are a Trace or a one-line TraceInputError."""
    from pptrace.load.loader import load_paths
    from pptrace.model.errors import TraceInputError

    try:
        trace = load_paths([path])
    except TraceInputError as exc:
        text = str(exc)
        assert "\n" not in text and len(text) < MAX_MESSAGE, text[:300]
        assert text.startswith(path), text[:300]
        assert exc.path == path
        return exc
    for problem in trace.problems:
        text = str(problem)
        assert "\n" not in text and len(text) < MAX_MESSAGE, text[:300]
        # A problem names its file (and line), or is about the whole input (no file, no line).
        assert problem.source == path or (problem.source == "" and problem.line is None)
    return trace


def _write(directory: str, name: str, data: bytes) -> str:
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


# --- random bytes ---------------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=4096), suffix=st.sampled_from([".jsonl", ".json"]))
def test_random_bytes(scratch: str, data: bytes, suffix: str) -> None:
    check_load(_write(scratch, "random" + suffix, data))


@FUZZ
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=2000))
def test_random_text(scratch: str, text: str) -> None:
    check_load(_write(scratch, "text.jsonl", text.encode("utf-8", "surrogatepass")))


# --- mutated real traces ----------------------------------------------------------------------

HOSTILE_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([10**30, -(10**30), 2**63, 2**64 + 1, -(2**63) - 1, 10**4000])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=50)
    | st.sampled_from(["", "\x00", "\u202e", "\x1b[31m", "[bold]x[/]", "9" * 5000, "a" * 100_000])
)
HOSTILE = st.recursive(
    HOSTILE_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=4),
    max_leaves=12,
)


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _nodes(v, (*path, i))


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return doc


@FUZZ
@given(data=st.data())
def test_mutated_real_trace(scratch: str, data: st.DataObject) -> None:
    lines = list(_good())
    which = data.draw(st.integers(0, len(lines) - 1), label="line")
    doc = json.loads(lines[which])
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        paths = list(_nodes(doc))
        path = data.draw(st.sampled_from(paths), label="path")
        action = data.draw(st.sampled_from(["replace", "delete", "duplicate"]), label="action")
        if action == "replace" or not path:
            doc = _replace(doc, path, data.draw(HOSTILE, label="value"))
        else:
            parent = doc
            for step in path[:-1]:
                parent = parent[step]
            if action == "delete":
                del parent[path[-1]]
            elif isinstance(parent, list):
                parent.append(parent[path[-1]])
    lines[which] = json.dumps(doc, allow_nan=True).encode() + b"\n"
    result = check_load(_write(scratch, "mutated.jsonl", b"".join(lines)))
    if not isinstance(result, Exception) and len(lines) > 1:
        # The untouched lines still count: one bad line never hides the rest.
        assert result.event_count > 0 or result.problems


@FUZZ
@given(data=st.data())
def test_truncated_anywhere(scratch: str, data: st.DataObject) -> None:
    whole = b"".join(_good())
    cut = data.draw(st.integers(0, len(whole)), label="cut")
    suffix = data.draw(st.sampled_from([".jsonl", ".json"]), label="suffix")
    check_load(_write(scratch, "cut" + suffix, whole[:cut]))


@FUZZ
@given(data=st.data())
def test_non_utf8_bytes_inside_a_real_line(scratch: str, data: st.DataObject) -> None:
    lines = list(_good())
    which = data.draw(st.integers(0, len(lines) - 1), label="line")
    line = lines[which]
    at = data.draw(st.integers(0, len(line) - 1), label="at")
    junk = data.draw(st.binary(min_size=1, max_size=4).filter(lambda b: b[0] >= 0x80))
    lines[which] = line[:at] + junk + line[at:]
    check_load(_write(scratch, "nonutf8.jsonl", b"".join(lines)))


# --- deep nesting (recursion) and huge values ------------------------------------------------


@pytest.mark.parametrize("depth", [100, 900, 5_000, 200_000])
@pytest.mark.parametrize("shape", ["list", "object", "in-span"])
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_deeply_nested_json(tmp_path: Path, good_lines: list[bytes], depth: int, shape: str,
                            suffix: str) -> None:
    if shape == "list":
        line = b"[" * depth + b"]" * depth
    elif shape == "object":
        line = b'{"a":' * depth + b"1" + b"}" * depth
    else:
        # A real span whose attribute value is a deeply nested array.
        doc = json.loads(good_lines[0])
        span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        span["attributes"][0]["value"] = {"arrayValue": {"values": ["@@"]}}
        head, tail = json.dumps(doc).encode().split(b'"@@"')
        nested = b'{"arrayValue":{"values":[' * depth + b"]}}" * depth
        line = head + nested + tail
    lines = [*good_lines, line + b"\n"] if suffix == ".jsonl" else [line]
    result = check_load(str(_write(str(tmp_path), "deep" + suffix, b"".join(lines))))
    if suffix == ".jsonl" and depth > 1000:
        # The nested line is reported with its line number; the good lines still load.
        assert not isinstance(result, Exception), result
        assert [p.line for p in result.problems] == [len(lines)]
        assert result.event_count > 0


@pytest.mark.parametrize(
    "value",
    [
        {"intValue": "9" * 4000},
        {"intValue": 10**4000},
        {"intValue": "-1"},
        {"doubleValue": "NaN"},
        {"stringValue": "x" * 5_000_000},
        {"arrayValue": {"values": [{"intValue": "1"}] * 20_000}},
        {"arrayValue": {"values": [{"stringValue": "\x1b]0;owned\x07"}] * 10}},
        {"boolValue": "true"},
        {"kvlistValue": {"values": [{"key": "a", "value": {"intValue": "1"}}]}},
        {"bytesValue": "////"},
        {},
    ],
    ids=lambda v: next(iter(v), "empty"),
)
def test_huge_or_odd_attribute_values(tmp_path: Path, good_lines: list[bytes],
                                      value: dict[str, Any]) -> None:
    lines = list(good_lines)
    doc = json.loads(lines[0])
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    for attr in span["attributes"]:
        attr["value"] = value  # every attribute at once: each reader meets it first somewhere
    lines[0] = json.dumps(doc).encode() + b"\n"
    check_load(str(_write(str(tmp_path), "odd.jsonl", b"".join(lines))))
    for attr in span["attributes"]:
        one = json.loads(good_lines[0])
        s1 = one["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        for a in s1["attributes"]:
            if a["key"] == attr["key"]:
                a["value"] = value
        data = json.dumps(one).encode() + b"\n" + b"".join(good_lines[1:])
        check_load(str(_write(str(tmp_path), "one.jsonl", data)))


@pytest.mark.parametrize("field", ["startTimeUnixNano", "endTimeUnixNano", "traceId", "spanId",
                                   "name", "attributes", "status", "kind"])
@pytest.mark.parametrize("value", [None, 10**400, -(10**20), "9" * 5000, 1.5e308, [], {}, "zz"])
def test_wrong_span_fields(tmp_path: Path, good_lines: list[bytes], field: str,
                           value: Any) -> None:
    doc = json.loads(good_lines[0])
    for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        span[field] = value
    data = json.dumps(doc).encode() + b"\n" + b"".join(good_lines[1:])
    check_load(str(_write(str(tmp_path), "fields.jsonl", data)))


def test_empty_directory_and_missing_and_unreadable(tmp_path: Path) -> None:
    from pptrace.load.loader import load_paths
    from pptrace.model.errors import TraceInputError

    for target in (tmp_path, tmp_path / "missing.jsonl"):
        with pytest.raises(TraceInputError) as info:
            load_paths([str(target)])
        assert "\n" not in str(info.value)
    fifo_dir = tmp_path / "odd"
    fifo_dir.mkdir()
    (fifo_dir / "dir.jsonl").mkdir()  # a directory named like a trace file
    with pytest.raises(TraceInputError) as info:
        load_paths([str(fifo_dir / "dir.jsonl")])
    assert "\n" not in str(info.value)


def _other_pythons() -> list[str]:
    """Other CPython interpreters on this machine (3.12+ parse JSON deeper than they recurse)."""
    found = []
    candidates = [shutil.which(n) for n in ("python3.12", "python3.13", "python3.14")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")))
    for exe in candidates:
        if exe is None:
            continue
        try:
            ok = subprocess.run([exe, "-c", "import json"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ok.returncode == 0:
            found.append(exe)
    return found


DEEP_SCRIPT = """
import sys
from pptrace.model.errors import TraceInputError
from pptrace.load.loader import load_paths
for depth in (900, 1200, 1600, 3000, 10000):
    for suffix in (".jsonl", ".json"):
        path = sys.argv[1] + suffix
        head = b'{"resourceSpans":[]}\\n' if suffix == ".jsonl" else b""
        with open(path, "wb") as f:
            f.write(head + b"[" * depth + b"]" * depth + b"\\n")
        try:
            load_paths([path])
        except TraceInputError as exc:
            assert "\\n" not in str(exc)
print("ok", sys.version_info[:2])
"""


@pytest.mark.slow
@pytest.mark.skipif(not _other_pythons(), reason="no python3.12+ interpreter on this machine")
def test_deep_nesting_on_other_pythons(tmp_path: Path) -> None:
    # The loader is pure Python with no third-party imports, so it runs under any interpreter.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for exe in _other_pythons():
        done = subprocess.run([exe, "-c", DEEP_SCRIPT, str(tmp_path / "deep")],
                              capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, PYTHONPATH=root))
        assert done.returncode == 0 and "ok" in done.stdout, (exe, done.stderr[-2000:])
