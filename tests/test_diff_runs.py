"""``pptrace diff A B``: names per direction, dtype and shape per name, bytes per step, errors.

A row is marked changed by ``CHANGE_RULE``: what the protocol carries differs, or the mean bytes
per step moved more than 10% and more than the per-step spread (a batch mix does not).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analyze
from pptrace.cli.main import main
from pptrace.model import errors
from pptrace.report.diff import CHANGE_RULE, bytes_changed, diff, profile, render_text
from tests.helpers_analyze import Run, golden_run, meta, write_run

GOLDEN = Path(__file__).parent / "data" / "golden-pp2"


def _good(pp: int = 2) -> Run:
    run = Run(pp_size=pp)
    for k in range(4):
        run.step([meta("topk", (k + 1, 4)), meta("entropy", (k + 1,))])
    return run


def _bad() -> Run:
    run = Run(pp_size=4)
    for k in range(4):
        run.attach([meta("topk", (k + 1, 4)), meta("entropy", (k + 1,)), meta("extra", (2,))])
        run.extract([meta("topk", (k + 1, 4)), meta("entropy", (k + 1,), "float16"),
                     meta("extra", (2,))])
    run.attach([], error=("RuntimeError", errors.ATTACH_EMPTY))
    return run


def _rows(a: Run, b: Run) -> dict[tuple[str, str], tuple[str, str, bool]]:
    ta, tb = a.trace(), b.trace()
    return {(r.section, r.subject): (r.a, r.b, r.changed)
            for r in diff(profile(ta, analyze(ta)), profile(tb, analyze(tb)))}


def test_same_run_has_no_difference() -> None:
    rows = _rows(_good(), _good())
    assert not any(changed for _, _, changed in rows.values())
    assert rows[("per name (attach)", "topk")] == ("float32 [*, 4]", "float32 [*, 4]", False)


def test_pp2_against_pp4_with_a_regression() -> None:
    rows = _rows(_good(), _bad())
    assert rows[("run", "layout")] == ("pp 2, tp 1", "pp 4, tp 1", True)
    assert rows[("names", "attached")] == ("topk, entropy", "topk, entropy, extra", True)
    assert rows[("per name (attach)", "extra")] == ("absent", "float32 [2]", True)
    assert rows[("per name (attach)", "entropy")][2] is False
    assert rows[("per name (extract)", "entropy")] == ("float32 [*]", "float16 [*]", True)
    # 8 more bytes a step (the extra name, marked above) is within the batch's spread (sd 22.4)
    assert rows[("bytes per step", "attach")] == ("50.0 (sd 22.4)", "58.0 (sd 22.4, x1.16)",
                                                  False)
    assert rows[("engine errors", "attach-empty")] == ("0", "1", True)
    assert rows[("findings", "dtype-mismatch")] == ("0", "4", True)


def test_cli_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(_good(), str(tmp_path / "a"))
    write_run(_bad(), str(tmp_path / "b"))
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "\n0 differences.\nRule: a row is marked changed when" in out
    assert " ".join(out.split("\nRule: ")[1].split()) == f"{CHANGE_RULE}."
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert "  entropy" in out and "float16 [*]  << changed" in out
    first, _, header = out.splitlines()[:3]
    assert first == f"pptrace diff: A = {tmp_path / 'a'}, B = {tmp_path / 'b'}"
    head_a, label_a, head_b, label_b = header.split()
    assert (head_a, head_b) == ("A:", "B:") and len(label_a) <= 40
    assert label_a.endswith("_json0/a") and label_b.endswith("_json0/b")
    # the B column starts under its header
    row = next(line for line in out.splitlines() if "float16 [*]" in line)
    assert row.index("float16 [*]") == header.index("B:")
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "pptrace.diff/1"
    assert doc["differences"] == sum(r["changed"] for r in doc["rows"]) > 5
    assert doc["rule"] == CHANGE_RULE
    assert set(doc["rows"][0]) == {"section", "subject", "a", "b", "changed"}


def test_cli_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["diff", str(GOLDEN), str(tmp_path / "empty.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "empty.jsonl:1: empty file" in err


# --- what a meaningful change is ---------------------------------------------------------------


def _batches(run: Run, sizes: list[int], dtype: str = "float32") -> Run:
    """A healthy step per batch size: topk [b, 4] and entropy [b] (20 bytes a row)."""
    for b in sizes:
        run.step([meta("topk", (b, 4), dtype), meta("entropy", (b,), dtype)])
    return run


def _changed(a: Run, b: Run) -> set[tuple[str, str]]:
    return {key for key, (_, _, changed) in _rows(a, b).items() if changed}


def test_golden_against_itself_is_no_difference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(GOLDEN), str(GOLDEN)]) == 0
    assert "\n0 differences.\n" in capsys.readouterr().out


def test_a_real_dtype_change_against_the_golden_run_is_marked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    changed = golden_run()
    for key, events in changed.events.items():
        changed.events[key] = [e._replace(tensors=tuple(
            t if t.name != "topk_logprobs" else meta(t.name, t.shape, "bfloat16")
            for t in e.tensors)) for e in events]
    write_run(changed, str(tmp_path / "b"))
    assert main(["diff", str(GOLDEN), str(tmp_path / "b"), "--format", "json"]) == 1
    rows = {(r["section"], r["subject"]): r for r in json.loads(capsys.readouterr().out)["rows"]}
    for d in ("attach", "extract"):
        row = rows[(f"per name ({d})", "topk_logprobs")]
        assert (row["a"], row["b"], row["changed"]) == ("float32 [*, 4]", "bfloat16 [*, 4]", True)
        assert rows[(f"per name ({d})", "entropy")]["changed"] is False
    assert rows[("run", "layout")]["changed"] is False


def test_a_4_percent_shift_from_another_batch_mix_is_not_marked() -> None:
    # pp4 against pp2 x tp2, the second run's batches 4% larger on average: only the layout
    # is a change.
    a = _batches(Run(pp_size=4), [10, 20, 30, 40, 50] * 4)
    b = _batches(Run(pp_size=2, tp_size=2), [10, 20, 30, 40, 56] * 4)
    rows = _rows(a, b)
    assert rows[("bytes per step", "attach")] == ("600.0 (sd 282.8)", "624.0 (sd 318.6, x1.04)",
                                                  False)
    assert rows[("bytes per step", "extract")][2] is False
    assert _changed(a, b) == {("run", "layout")}
    text = render_text(diff(profile(a.trace(), []), profile(b.trace(), [])), "pp4/", "pp2tp2/")
    assert "x1.04)\n" in text and text.count("<< changed") == 1


def test_three_times_the_bytes_is_marked() -> None:
    # The same names, dtypes and shape patterns: only the bytes say the batches grew 3x.
    a = _batches(Run(pp_size=2), [10, 20, 30, 40, 50] * 4)
    b = _batches(Run(pp_size=2), [30, 60, 90, 120, 150] * 4)
    rows = _rows(a, b)
    assert rows[("bytes per step", "attach")] == ("600.0 (sd 282.8)",
                                                  "1800.0 (sd 848.5, x3.00)", True)
    assert _changed(a, b) == {("bytes per step", "attach"), ("bytes per step", "extract")}


@pytest.mark.parametrize(("a", "sd_a", "b", "sd_b", "changed"), [
    (100.0, 0.0, 104.0, 0.0, False),  # 4%, no spread at all: under the 10% floor
    (100.0, 0.0, 111.0, 0.0, True),  # over the floor, nothing explains it
    (100.0, 50.0, 130.0, 50.0, False),  # 30%, within the spread
    (100.0, 50.0, 300.0, 150.0, True),  # 3x, beyond the pooled spread (112)
    (0.0, 0.0, 0.0, 0.0, False),
    (0.0, 0.0, 8.0, 0.0, True),
])
def test_bytes_rule(a: float, sd_a: float, b: float, sd_b: float, changed: bool) -> None:
    assert bytes_changed(a, sd_a, b, sd_b) is changed
    assert bytes_changed(b, sd_b, a, sd_a) is changed


def test_a_count_of_a_kind_both_runs_have_is_not_a_change() -> None:
    a, b = _good(), _good()
    for run, n in ((a, 1), (b, 3)):
        for _ in range(n):
            run.attach([], error=("RuntimeError", errors.ATTACH_EMPTY))
    rows = _rows(a, b)
    assert rows[("engine errors", "attach-empty")] == ("1", "3", False)
    assert rows[("findings", "attach-empty")][2] is False


# --- the message layer -------------------------------------------------------------------------


def _with_messages(run: Run, *, residual: bool = False, hidden: str = "float32",
                   sliced: bool = False) -> Run:
    """Proxy messages pp0 -> pp1 (hidden states, and a residual when asked) and the output
    messages back, a batch of 2 then 3."""
    from tests.helpers_analyze import mt

    for b in (2, 3):
        proxy = [mt("hidden_states", (b, 16), hidden, sliced=sliced)]
        if residual:
            proxy.append(mt("residual", (b, 16)))
        run.message("proxy", proxy, frm=0, to=1)
        run.message("output", [mt("next_token_ids", (b,), "int64"),
                               mt("lens", (), "list", is_tensor=False)], frm=1, to=0)
    return run


def test_the_message_layer_of_two_runs_key_by_key() -> None:
    same = _rows(_with_messages(_good()), _with_messages(_good()))
    assert not any(changed for _, _, changed in same.values())
    assert same[("messages", "proxy sends")] == ("2", "2", False)
    assert same[("per key (proxy)", "hidden_states")] == ("float32 [*, 16]", "float32 [*, 16]",
                                                          False)
    assert same[("per key (output)", "lens")][0] == "list (not a tensor)"
    rows = _rows(_with_messages(_good()),
                 _with_messages(_good(), residual=True, hidden="bfloat16", sliced=True))
    assert rows[("messages", "proxy keys")] == ("2 keys", "3 keys (+residual)", True)
    assert rows[("per key (proxy)", "residual")] == ("absent", "float32 [*, 16]", True)
    assert rows[("per key (proxy)", "hidden_states")] == ("float32 [*, 16]",
                                                          "bfloat16 [*, 16]/tp", True)
    assert rows[("messages", "output keys")][2] is False
    # Sections in report order: the attach/extract rows, then the message layer's.
    sections = list(dict.fromkeys(s for s, _ in rows))
    assert sections.index("messages") == sections.index("bytes per step") + 1
    assert sections[sections.index("messages") + 1:][:2] == ["per key (proxy)",
                                                             "per key (output)"]


def test_a_run_without_the_message_layer_is_said_and_never_marked() -> None:
    rows = _rows(_good(), _with_messages(_good()))
    assert rows[("messages", "proxy sends")] == ("not recorded", "2", False)
    assert rows[("per key (proxy)", "hidden_states")] == ("not recorded", "float32 [*, 16]",
                                                          False)
    assert not any(changed for _, _, changed in rows.values())
    assert not any(section == "messages" for section, _ in _rows(_good(), _good()))


def test_at_80_columns_each_row_fits_without_the_terminal_wrapping_it() -> None:
    # The table is 123 columns wide for these labels: at 80 the terminal split every row.
    a, b = _good().trace(), _bad().trace()
    rows = diff(profile(a, analyze(a)), profile(b, analyze(b)))
    label_a, label_b = "runs/" + "good-commit-" * 4, "runs/" + "bad-commit-" * 4
    wide = render_text(rows, label_a, label_b)
    assert max(map(len, wide.splitlines())) > 80  # a pipe or a log: the table as it is
    narrow = render_text(rows, label_a, label_b, columns=80)
    assert max(map(len, narrow.splitlines())) <= 80, narrow
    for r in rows:  # every row still says its subject, both sides and whether it changed
        at = narrow.index(f"\n  {r.subject}" + ("  << changed" if r.changed else "") + "\n")
        assert f"A: {r.a}" in narrow[at:] and f"B: {r.b}" in narrow[at:]
