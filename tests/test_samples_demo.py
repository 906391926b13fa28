"""``pptrace demo``: its options, its fault list, and short real runs."""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pptrace_samples.faults import ALL_FAULTS, FAULTS, MESSAGE_FAULTS, fault_names
from pptrace_samples.options import PipelineOptions

from pptrace.cli import demo as cli_demo
from pptrace.model.errors import ConfigError


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pptrace")
    cli_demo.add_parser(parser.add_subparsers())
    return parser.parse_args(["demo", *argv])


def test_defaults_are_the_main_job() -> None:
    args = _parse()
    assert (args.ranks, args.tp, args.steps, args.fault, args.out) == (4, 1, 32, None, None)


def test_list_faults_is_one_line_per_fault(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_demo.run(_parse("--list-faults")) == 0
    lines = capsys.readouterr().out.splitlines()
    # Every fault the demo takes: the auxiliary-output faults, then the message layer's.
    assert [line.split()[0] for line in lines] == [*fault_names(), *MESSAGE_FAULTS]
    for line, fault in zip(lines, ALL_FAULTS.values(), strict=True):
        assert line.endswith(f"{fault.where}: {fault.engine}")


@pytest.mark.slow
def test_list_faults_does_not_import_torch() -> None:
    code = ("import sys; from pptrace.cli import demo as cli_demo; "
            "cli_demo.list_faults(sys.stdout); "
            "sys.exit('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == len(ALL_FAULTS)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fault": "nope"}, "unknown fault 'nope'"),
        ({"ranks": 3, "tp": 2}, "not a multiple of --tp 2"),
        ({"ranks": 2, "tp": 2}, "at least 2 pipeline stages"),
        ({"ranks": 16}, "need 2 to 8 ranks"),
        ({"steps": 0}, "--steps must be at least 1"),
        ({"transport": "grpc"}, "transport 'grpc'"),
    ],
)
def test_bad_layouts_are_one_line_errors(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PipelineOptions(**options).resolved()  # type: ignore[arg-type]


@pytest.mark.parametrize(("ranks", "want"), [(2, (4, 2)), (4, (4, 2)), (5, (6, 2))])
def test_tp_fault_picks_two_tp_ranks(ranks: int, want: tuple[int, int]) -> None:
    opts = PipelineOptions(ranks=ranks, fault="tp-disagree").resolved()
    assert (opts.ranks, opts.tp) == want


def test_default_out_dir_is_fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    now = datetime.datetime(2026, 1, 2, 3, 4, 5)
    first = cli_demo.default_out_dir(now)
    assert first == os.path.join("pptrace-traces", "demo-20260102-030405")
    os.makedirs(first)
    assert cli_demo.default_out_dir(now) == first + "-2"


def test_out_dir_with_traces_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pptrace-rank0-pid1.otlp.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match="already holds trace files"):
        cli_demo.run(_parse("--out", str(tmp_path)))


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_healthy_demo_exits_0_with_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[str] = []

    def analysis(out_dir: str, view: bool = False) -> int:
        assert not view  # pytest's stdin is no terminal: the viewer stays closed
        handed.append(out_dir)
        return 0

    monkeypatch.setattr(cli_demo, "_analyze_and_report", analysis)
    out = str(tmp_path / "demo")
    assert cli_demo.run(_parse("--ranks", "2", "--steps", "4", "--out", out)) == 0
    captured = capsys.readouterr()
    assert handed == [out]
    assert ("stage 0 check: 4 outputs left the last stage with an auxiliary output attached: "
            "4 arrived identical to what the last stage computed, 0 differed, 0 never sent "
            "(skipped)\n") in captured.out
    assert len([n for n in os.listdir(out) if n.endswith(".otlp.jsonl")]) == 2
    assert "steps r0 4/4  r1 4/4" in captured.err


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_demo_hands_its_traces_to_the_analyzer(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "demo")
    status = cli_demo.run(_parse("--ranks", "2", "--steps", "3", "--fault", "duplicate",
                                 "--out", out))
    text = capsys.readouterr().out
    assert status == 1
    assert "rank 1: RuntimeError: duplicate auxiliary PP tensor 'topk_logprobs'" in text
    assert "pptrace analyze" in text


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("no_view", [False, True])
def test_interactive_demo_opens_the_viewer_on_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_view: bool
) -> None:
    from pptrace.cli import view as cli_view

    opened: list[tuple[int, int, list[str]]] = []

    def view(trace: object, judged: object, paths: list[str], **_: object) -> int:
        # The demo hands the viewer the analysis itself (findings and the channels judged).
        count = len(judged.findings)  # type: ignore[attr-defined]
        opened.append((trace.event_count, count, list(paths)))  # type: ignore[attr-defined]
        return 0

    monkeypatch.setattr(cli_demo, "_interactive", lambda: True)
    monkeypatch.setattr(cli_view, "view", view)
    out = str(tmp_path / "demo")
    argv = ["--ranks", "2", "--steps", "3", "--out", out] + (["--no-view"] if no_view else [])
    assert cli_demo.run(_parse(*argv)) == 0
    assert opened == ([] if no_view else [(6, 0, [out])])


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_silent_fault_demo_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "demo")
    status = cli_demo.run(_parse("--ranks", "2", "--steps", "4", "--fault", "dtype-in-transit",
                                 "--out", out, "--no-analyze"))
    text = capsys.readouterr().out
    assert status == 1
    assert "first difference at forward 2: entropy: dtype torch.float16" in text


def test_the_docs_list_every_fault() -> None:
    # docs/reference/faults.md is generated from the registries (tests/test_docs_fresh.py keeps
    # it fresh): the auxiliary-output faults first, then the message layer's, each in order.
    page = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "faults.md").read_text(
        encoding="utf-8")
    aux, messages = page.split("## The message layer")
    for section, registry in ((aux, FAULTS), (messages, MESSAGE_FAULTS)):
        rows = [line for line in section.splitlines() if line.startswith("| `")]
        assert [row.split("`")[1] for row in rows] == list(registry)
        for row, fault in zip(rows, registry.values(), strict=True):
            assert f"`{fault.finding}`" in row
            assert fault.error is None or f"`{fault.error}`" in row
    assert list(FAULTS) == fault_names()
