"""What the analyzer's reports print: the one escaper, plurals, counts that add up, caps.

The escaper (``pptrace.model.text.inert``) is the one the text report, the diff, the error lines
and the viewer use; plurals read right for 0, 1 and many; every count counts what its sentence
names; a huge finding or message is cut, saying so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers_analyze import Run, meta, write_run

from pptrace.analyze.analyzer import analyze
from pptrace.cli.main import main
from pptrace.model import errors
from pptrace.model.errors import TraceInputError
from pptrace.model.findings import Severity
from pptrace.model.text import MESSAGE_LIMIT, clip, inert, plural
from pptrace.report.text import render_text

RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
HOSTILE = ["rtl\u202eexe.txt", "ltr\u202dx", "iso\u2066y\u2069", "esc\x1b[31m", "c1\x9b31m",
           "nl\nFAIL: forged", "cr\rX", "sep\u2028z", "bell\x07"]


@pytest.mark.parametrize("text", HOSTILE)
def test_inert_escapes_controls_separators_and_bidi(text: str) -> None:
    shown = inert(text)
    assert RAW.search(shown) is None
    assert "\n" not in shown


def test_inert_spells_bidi_overrides_as_escapes() -> None:
    assert inert("a\u202eb\u202dc") == "a\\u202eb\\u202dc"
    assert inert("\x1b[1m\x9b") == "\\x1b[1m\\x9b"
    assert inert("plain ü 日本") == "plain ü 日本"


def test_trace_input_errors_use_the_same_escaper() -> None:
    err = TraceInputError("bad \u202e name", path="x\u202d.jsonl", line=3)
    assert str(err) == "x\\u202d.jsonl:3: bad \\u202e name"
    assert errors.inert is inert


def _hostile_run() -> Run:
    run = Run()
    for name in HOSTILE:
        run.step([meta(name)])
    run.attach([meta("s")], error=("RuntimeError", "boom \u202e\x1b[2J"))
    run.attach([meta("s")])
    run.extract([meta("s", dtype="float16")])
    return run


def test_text_report_shows_hostile_names_inertly() -> None:
    run = _hostile_run()
    trace = run.trace()
    findings = analyze(trace)
    assert findings
    text = render_text(trace, findings, Severity.ERROR)
    assert RAW.search(text.replace("\n", "")) is None
    assert "\\u202e" in text


def test_json_report_on_the_command_line_is_ascii(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    write_run(_hostile_run(), str(tmp_path))
    main(["analyze", "--no-progress", "--format", "json", str(tmp_path)])
    out = capsys.readouterr().out
    assert out.isascii()
    doc = json.loads(out)
    # The JSON keeps the exact text (a program reads it); only its encoding is inert.
    assert any("\u202e" in f["message"] for f in doc["findings"])


@pytest.mark.parametrize(("n", "want"), [(0, "0 findings"), (1, "1 finding"),
                                         (2, "2 findings")])
def test_plural(n: int, want: str) -> None:
    assert plural(n, "finding") == want


def test_plural_forms() -> None:
    assert plural(1, "process") == "1 process"
    assert plural(2, "process") == "2 processes"
    assert plural(1, "key", "prefixed") == "1 prefixed key"
    assert plural(3, "key", "prefixed") == "3 prefixed keys"
    assert plural(0, "sequence number", "missing") == "0 missing sequence numbers"
    assert plural(2, "was", many="were") == "2 were"


def test_clip_says_what_it_cut() -> None:
    assert clip("short") == "short"
    text = clip("x" * 10_000)
    assert len(text) <= MESSAGE_LIMIT + 40
    assert text.endswith("more characters cut)")
    assert f"({10_000 - (MESSAGE_LIMIT - 40):,} more characters cut)" in text
