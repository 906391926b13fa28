"""Bad input: one line naming the file and line, exit status 2, never a traceback; or, where the
rest of the input is usable, the bad part skipped and counted as an InputProblem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pptrace.cli.main import main
from pptrace.load.loader import load_paths
from pptrace.model import schema
from pptrace.model.errors import SchemaVersionError, TraceInputError
from tests.helpers_analyze import Run, meta, write_otlp_lines

GOLDEN = Path(__file__).parent / "data" / "golden-pp2"


def _good_lines(n: int = 3) -> list[str]:
    run = Run()
    for _ in range(n):
        run.step([meta("scores")])
    return [json.dumps(_doc_of(ev)) for ev in run.all_events()]


def _doc_of(ev) -> dict:  # type: ignore[no-untyped-def, type-arg]
    from tests.helpers_analyze import event_spans, otlp_document

    return otlp_document(event_spans([ev]))


def _span_line(**changes: object) -> str:
    run = Run()
    ev = run.attach([meta("scores")])
    doc = _doc_of(ev)
    attrs = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    for item in attrs:
        if item["key"] in changes:
            item["value"] = changes[item["key"]]
    return json.dumps(doc)


def _analyze(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, str, str]:
    status = main(["analyze", "--no-progress", *map(str, paths)])
    out, err = capsys.readouterr()
    return status, out, err


def _one_line_error(err: str, needle: str) -> None:
    assert err.count("\n") == 1, err
    assert err.startswith("pptrace: error: "), err
    assert needle in err, err
    assert "Traceback" not in err


BAD_FILES = {
    "empty file": (b"", ":1: empty file"),
    "whitespace only": (b"\n  \n", ":1: empty file"),
    "binary": (b"\x7fELF\x02\x01\x01\x00\x00\x00garbage", ":1: binary data"),
    "binary after text": (b'{"resourceSpans": []}\n\x00\x01\x02', ":2: binary data"),
    "latin-1 text": ("{'bad': 'é'}\n".encode("latin-1") * 3, ":1: not UTF-8"),
    "not JSON": (b"hello world\n", ":1: "),
    "JSON of another kind": (b'{"hello": "world"}\n', "not a trace"),
    "wrong structure": (b'{"resourceSpans": 5}\n', "'resourceSpans' should be a list"),
    "wrong types in a span": (
        _span_line(**{schema.SEQ: {"stringValue": "three"}}).encode() + b"\n",
        "'pptrace.seq' should be an integer",
    ),
    "unknown schema version": (
        _span_line(**{schema.VERSION: {"intValue": "99"}}).encode() + b"\n",
        "schema version 99 is not supported",
    ),
    "broken pretty document": (b'{\n  "resourceSpans": [\n    {"resource": \n', ":4: not valid"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_unusable_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    content, needle = BAD_FILES[case]
    path = tmp_path / "trace.json"
    path.write_bytes(content)
    status, out, err = _analyze(capsys, path)
    assert status == 2
    assert out == ""
    _one_line_error(err, needle)
    assert str(path) in err


def test_missing_path_and_empty_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = _analyze(capsys, tmp_path / "nope.jsonl")
    assert status == 2
    _one_line_error(err, "nope.jsonl: no such file")
    status, _, err = _analyze(capsys, tmp_path)
    assert status == 2
    _one_line_error(err, "no trace files")
    status, _, err = _analyze(capsys, tmp_path / "*.jsonl")
    assert status == 2
    _one_line_error(err, "no file matches")
    assert main(["analyze"]) == 2
    _one_line_error(capsys.readouterr().err, "no input")


def test_truncated_last_line_is_skipped_and_counted(tmp_path: Path) -> None:
    lines = _good_lines()
    path = tmp_path / "rank.jsonl"
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    trace = load_paths([str(path)])
    assert trace.event_count == len(lines) - 1
    (problem,) = trace.problems
    assert problem.line == len(lines)
    assert "truncated last line" in problem.message
    assert str(problem).startswith(f"{path}:{len(lines)}: ")


def test_bad_middle_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    lines = _good_lines()
    bad_types = _span_line(**{schema.SEQ: {"stringValue": "x"}})
    path = tmp_path / "rank.jsonl"
    path.write_text("\n".join([lines[0], "not json", bad_types, '{"resourceSpans": 1}',
                               *lines[1:]]) + "\n")
    trace = load_paths([str(path)])
    assert trace.event_count == len(lines)
    assert [(p.line, p.message.split(" (")[0].split(":")[0]) for p in trace.problems] == [
        (2, "line is not JSON"),
        (3, "skipped a pptrace.attach span"),
        (4, "'resourceSpans' should be a list, found int; line skipped"),
    ]


def test_report_shows_problems_and_keeps_the_findings_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _good_lines()
    path = tmp_path / "rank.jsonl"
    path.write_text("\n".join(lines) + "\n{\"resourceSp")
    status, out, err = _analyze(capsys, path)
    assert status == 0 and err == ""
    assert "Input problems (skipped and counted): 1" in out
    assert f"{path}:{len(lines) + 1}: truncated last line" in out


def test_one_unusable_file_among_good_ones_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    run = Run()
    run.step([meta("scores")])
    write_otlp_lines(str(tmp_path / "good.jsonl"), run.all_events())
    trace = load_paths([str(tmp_path)])
    assert trace.event_count == 2
    (problem,) = trace.problems
    assert problem.source.endswith("empty.jsonl")
    assert problem.message == "file skipped: empty file: no trace data"


def test_unknown_schema_version_is_fatal_even_among_good_files(tmp_path: Path) -> None:
    (tmp_path / "new.jsonl").write_text(
        _span_line(**{schema.VERSION: {"intValue": "4"}}) + "\n")
    for p in GOLDEN.iterdir():
        (tmp_path / p.name).write_bytes(p.read_bytes())
    with pytest.raises(SchemaVersionError) as info:
        load_paths([str(tmp_path)])
    assert str(info.value).startswith(f"{tmp_path / 'new.jsonl'}:1: pptrace schema version 4")
    assert isinstance(info.value, TraceInputError)


def test_a_skipped_line_quoting_a_newline_or_separator_stays_one_line(tmp_path: Path) -> None:
    # A JSON key with a newline, a line separator and an ESC, quoted in the problem's message.
    bad = json.dumps({"\n": 1, "\u2028": 2, "\x1b[2J": 3})
    path = tmp_path / "t.jsonl"
    good = _good_lines(2)
    path.write_text("\n".join([good[0], bad, *good[1:]]) + "\n")
    trace = load_paths([str(path)])
    assert trace.event_count > 0
    [problem] = trace.problems
    text = str(problem)
    assert "found keys" in text and "\\x0a" in text and "\\u2028" in text and "\\x1b" in text
    assert len(text.splitlines()) == 1 and "\x1b" not in text
