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

from pptrace.analyze.analyzer import analyze
from pptrace.cli.main import main
from pptrace.model import errors
from pptrace.model.errors import TraceInputError
from pptrace.model.findings import Severity
from pptrace.model.text import MESSAGE_LIMIT, clip, inert, plural
from pptrace.report.text import render_text
from tests.helpers_analyze import Run, meta, write_run

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


# --- counts that count what their sentence names ------------------------------------------------


def test_a_reserved_name_is_counted_once_per_attach_on_its_own_channel() -> None:
    run = Run(pp_size=2, tp_size=2)
    for _ in range(5):
        run.step([meta("next_token_ids", (8,), "int64")])
    findings = analyze(run.trace())
    assert sorted((f.kind.value, f.channel, f.cascade) for f in findings) == [
        ("reserved-name", "pp1/tp0", 4), ("reserved-name", "pp1/tp1", 4)]
    for f in findings:
        assert f.message.startswith(f"rank {f.ranks[0]} attached auxiliary name")
        assert "(and 4 more like this through microbatch 4)" in f.message


def test_an_extract_side_name_problem_without_its_attach_still_counts() -> None:
    run = Run()
    run.step([meta("s")])
    run.attach([meta("s")])
    run.extract([meta("s"), meta("", key="__sampling_observer_output__.")])
    kinds = sorted(f.kind.value for f in analyze(run.trace()))
    assert kinds == ["empty-name", "prefixed-foreign-key"]


def test_engine_error_says_one_key_in_the_singular() -> None:
    run = Run()
    run.step([meta("s")])
    run.attach([meta("s")], error=("RuntimeError", errors.ATTACH_BAD_NAME),
               inserted=("__sampling_observer_output__.s",))
    (f,) = analyze(run.trace())
    assert f.message.endswith("; it left 1 prefixed key in the dict")


def test_a_loss_without_a_counter_names_what_is_missing() -> None:
    run = Run()
    for _ in range(3):
        run.step([meta("s")])
    run.set_stats(0, recorded=4, exported=3)
    (f,) = analyze(run.trace())
    assert f.message.startswith("rank 0 lost 1 event (1 recorded but not in the trace):")


def test_text_report_reads_right_for_one() -> None:
    run = Run()
    run.step([meta("s")])
    run.attach([meta("s")])
    run.extract([meta("s", dtype="float16")])
    trace = run.trace()
    text = render_text(trace, analyze(trace), Severity.ERROR)
    assert "1 finding (1 error; 1 occurrence)." in text
    assert "(1 finding, 1 occurrence)" in text
    assert text.rstrip().endswith("FAIL: 1 finding at or above error.")
    empty = render_text(run.trace(), [], Severity.ERROR)
    assert empty.rstrip().endswith("OK: 0 findings at or above error.")


# --- oversized input gives bounded output, saying what was cut ----------------------------------


def test_a_span_with_100k_tensors_gives_a_short_report() -> None:
    run = Run()
    run.step([meta("s")])
    wide = [meta(f"t{i}", (2,)) for i in range(100_000)]
    run.attach(wide)  # never extracted: an orphan naming its tensors
    trace = run.trace()
    text = render_text(trace, analyze(trace), Severity.ERROR)
    assert len(text) < 20_000
    assert "and 99990 more" in text


def test_a_huge_error_message_is_cut_and_says_so() -> None:
    run = Run()
    run.step([meta("s")])
    run.attach([meta("s")], error=("RuntimeError", "x" * 10_000_000))
    trace = run.trace()
    findings = analyze(trace)
    assert all(len(f.message) < 3 * MESSAGE_LIMIT for f in findings)
    text = render_text(trace, findings, Severity.ERROR)
    assert len(text) < 20_000
    assert "more characters cut)" in text
