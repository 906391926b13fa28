"""The demo as a new user meets it: counts that add up, the closing lines, and spans to Jaeger.

The OTLP test runs the real demo (gloo ranks) against the project's real OTLP receiver
(``tests/otlp_receiver.py``, the official protobuf service definitions), configured the two ways
the README shows: the standard variables, and the demo's own ``--endpoint`` option.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pptrace.cli import demo as cli_demo
from pptrace.cli.demo import Stage0Check, next_steps, why_no_viewer
from tests.otlp_receiver import Receiver


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pptrace")
    cli_demo.add_parser(parser.add_subparsers())
    return parser.parse_args(["demo", *argv])


@pytest.mark.parametrize(("check", "sentence", "complete"), [
    (Stage0Check(attached=4, matched=4, mismatched=0, skipped=0),
     "4 outputs left the last stage with an auxiliary output attached: 4 arrived identical to "
     "what the last stage "
     "computed, 0 differed, 0 never sent (skipped)", True),
    (Stage0Check(attached=1, matched=1, mismatched=0, skipped=0),
     "1 output left the last stage with an auxiliary output attached: 1 arrived identical to "
     "what the last stage "
     "computed, 0 differed, 0 never sent (skipped)", True),
    # no-observer: stage 0 raised at its first extract, the rest never reached a check
    (Stage0Check(attached=2, matched=0, mismatched=0, skipped=0),
     "2 outputs left the last stage with an auxiliary output attached: 0 arrived identical to "
     "what the last stage "
     "computed, 0 differed, 0 never sent (skipped), 2 never checked on stage 0", False),
    # skipped-send: one output never reached stage 0, so the run is not healthy
    (Stage0Check(attached=6, matched=5, mismatched=0, skipped=1),
     "6 outputs left the last stage with an auxiliary output attached: 5 arrived identical to "
     "what the last stage "
     "computed, 0 differed, 1 never sent (skipped)", False),
], ids=["healthy", "one", "no-observer", "skipped-send"])
def test_the_stage0_check_counts_what_it_names(check: Stage0Check, sentence: str,
                                               complete: bool) -> None:
    assert check.sentence() == sentence
    assert check.complete is complete
    assert check.matched + check.mismatched + check.skipped + check.unchecked == check.attached


@pytest.mark.parametrize(("argv", "interactive", "installed", "why"), [
    ([], True, True, None),
    ([], False, True, "stdin or stdout is not a terminal"),
    (["--no-view"], True, True, "--no-view"),
    (["--no-analyze"], True, True, "--no-analyze"),
    ([], True, False, "the viewer is not installed: pip install 'pptrace[view]'"),
])
def test_the_demo_says_why_the_viewer_stayed_closed(argv: list[str], interactive: bool,
                                                     installed: bool, why: str | None) -> None:
    assert why_no_viewer(_parse(*argv), interactive, installed) == why


def test_the_closing_lines_suggest_only_what_the_demo_did_not_run() -> None:
    assert next_steps("D", analyzed=True, no_viewer=None) == []
    assert next_steps("D", analyzed=True, no_viewer="--no-view") == [
        "next: pptrace view D   (the viewer did not open: --no-view)"]
    assert next_steps("D", analyzed=False, no_viewer="--no-analyze") == [
        "next: pptrace analyze D",
        "next: pptrace view D   (the viewer did not open: --no-analyze)"]


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_skipped_send_is_not_a_healthy_run(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "demo")
    status = cli_demo.run(_parse("--ranks", "2", "--steps", "6", "--fault", "skipped-send",
                                 "--out", out, "--no-view"))
    text = capsys.readouterr().out
    assert "1 never sent (skipped)" in text
    assert status == 1  # the README: exit 0 needs every output to reach stage 0


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize("how", ["variables", "options"])
def test_the_demo_sends_its_spans_to_an_otlp_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    with Receiver("http") as rx:
        argv = ["--ranks", "2", "--steps", "3", "--out", str(tmp_path / "demo"), "--no-view"]
        if how == "variables":
            monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", rx.env_protocol)
            monkeypatch.setenv("OTEL_SERVICE_NAME", "demo-test")
        else:
            argv += ["--endpoint", rx.endpoint, "--protocol", rx.env_protocol,
                     "--service-name", "demo-test"]
        assert cli_demo.run(_parse(*argv)) == 0
        spans = rx.spans()
    names = [name for _, _, name in spans]
    assert names.count("pptrace.attach") == 3 and names.count("pptrace.extract") == 3
    assert {res["service.name"] for res, _, _ in spans} == {"demo-test"}
    assert f"(and OTLP to {rx.endpoint}, service demo-test)" in capsys.readouterr().out
