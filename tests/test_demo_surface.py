"""The demo as a new user meets it: counts that add up, the closing lines, and spans to Jaeger.

The OTLP test runs the real demo (gloo ranks) against the project's real OTLP receiver
(``tests/otlp_receiver.py``, the official protobuf service definitions), configured the two ways
docs/quickstart.md shows: the standard variables, and the demo's own ``--endpoint`` option.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pptrace.cli import demo as cli_demo
from pptrace.cli.demo import Stage0Check, next_steps, why_no_viewer
from tests.helpers_startup import REPO, child_env
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
    assert status == 1  # docs/quickstart.md: exit 0 needs every output to reach stage 0


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize(("how", "protocol"), [("variables", "http"), ("options", "http"),
                                               ("variables", "json"), ("options", "json")])
def test_the_demo_sends_its_spans_to_an_otlp_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    how: str, protocol: str,
) -> None:
    with Receiver(protocol) as rx:
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
    assert (rx.json_requests > 0) == (protocol == "json")  # each path really taken
    assert f"(and OTLP to {rx.endpoint}, service demo-test)" in capsys.readouterr().out


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
def test_a_sink_that_cannot_open_costs_only_its_own_copy(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          protocol: str) -> None:
    """Found by trying the quickstart's Jaeger command in a fresh venv: without an OTLP exporter the
    whole sink failed, and the trace file was never written. Now the file goes on and OTLP's
    loss is counted as OTLP's, on the SDK path and on the JSON one alike."""
    import pptrace.export.otlp as otlp
    import pptrace.export.otlp_json as otlp_json
    from pptrace.export.sinks import build_sink
    from pptrace.load.loader import load_paths
    from pptrace.model.config import Config
    from pptrace.model.records import RankInfo
    from pptrace.record.engine import (
        add_auxiliary_output_to_pp_tensors,
        pop_auxiliary_output_from_pp_tensors,
    )
    from pptrace.record.recorder import Recorder
    from pptrace.record.wrapper import wrap_transport
    from tests.doubles import Observer, Output

    def no_exporter(*_: object, **__: object) -> None:
        raise ModuleNotFoundError("No module named 'opentelemetry.exporter.otlp.proto.http'")

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    if protocol == "http/json":
        monkeypatch.setattr(otlp_json.JsonShipper, "from_env", no_exporter)
    else:
        monkeypatch.setattr(otlp, "otlp_processor", no_exporter)
    cfg = Config(trace_dir=str(tmp_path), exporters=("file", "otlp"), flush_interval=0.05,
                 otlp_ship="inline")  # the in-process sinks (the default ships from the files)
    info = RankInfo(rank=0, world_size=1, pid=1)
    rec = Recorder(cfg, sink_factory=lambda r: build_sink(cfg, r),
                   rank_provider=lambda: (info, True))
    rec.start()
    attach, extract = wrap_transport(add_auxiliary_output_to_pp_tensors,
                                     pop_auxiliary_output_from_pp_tensors, rec)
    for _ in range(3):
        tensors: dict[str, object] = {}
        attach(tensors, Output(2))
        extract(tensors, Observer())
    rec.shutdown()
    trace = load_paths([str(tmp_path)])
    assert trace.event_count == 6  # the file has every event
    stats = trace.processes[0].stats
    assert stats is not None and stats.dropped == 0 and stats.sink_lost("otlp") > 0


@pytest.mark.parametrize(("missing", "options", "needs"), [
    # beside the files, the shipper sends grpc: it needs grpcio, not OpenTelemetry's exporter
    ("grpc", ("--endpoint", "http://127.0.0.1:4317", "--protocol", "grpc"), "grpc"),
    # without the files, the engine's process sends it through OpenTelemetry's exporter
    ("otlp.proto.grpc", ("--export", "otlp", "--endpoint", "http://127.0.0.1:4317",
                         "--protocol", "grpc"), "opentelemetry.exporter.otlp.proto.grpc"),
    ("otlp.proto.http", ("--export", "otlp", "--protocol", "http/protobuf"),
     "opentelemetry.exporter.otlp.proto.http"),
    ("opentelemetry.proto", ("--protocol", "http/protobuf"), "opentelemetry.proto"),
], ids=["shipped-grpc", "inline-grpc", "inline-protobuf", "shipped-protobuf"])
def test_otlp_without_its_exporter_is_one_line_before_any_rank_starts(
        monkeypatch: pytest.MonkeyPatch, missing: str, options: tuple[str, ...],
        needs: str) -> None:
    import importlib.util

    from pptrace.cli import tracing
    from pptrace.model.errors import ConfigError

    real = importlib.util.find_spec

    def find_spec(name: str, *a: object) -> object:
        return None if name == missing or name.endswith(missing) else real(name, *a)

    monkeypatch.setattr(tracing.importlib.util, "find_spec", find_spec)
    with pytest.raises(ConfigError, match=rf"^OTLP export over \S+ needs {re.escape(needs)}: "
                       r"pip install 'pptrace\[otlp\]'$"):
        tracing.export_env(_parse(*options), {})
    tracing.export_env(_parse("--endpoint", "http://127.0.0.1:4318"), {})  # http/json is there


def test_a_shipped_grpc_export_needs_no_opentelemetry_exporter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from pptrace.cli import tracing

    real = importlib.util.find_spec
    monkeypatch.setattr(tracing.importlib.util, "find_spec",
                        lambda name, *a: None if "exporter.otlp" in name else real(name, *a))
    env = tracing.export_env(_parse("--endpoint", "http://127.0.0.1:4317", "--protocol",
                                    "grpc"), {})
    assert env["PPTRACE_EXPORT"] == "file,otlp"


@pytest.mark.parametrize(("files", "named"), [
    ([], "pptrace-rank2-pid7.otlp.jsonl"),  # nothing written (yet): the name it would have
    (["pptrace-rank2-pid7.otlp.jsonl"], "pptrace-rank2-pid7.otlp.jsonl"),
    (["pptrace-rank2-pid7.otlp.jsonl.zst"], "pptrace-rank2-pid7.otlp.jsonl.zst"),
    (["pptrace-rank2-pid7.000003.otlp.jsonl.gz", "pptrace-rank2-pid7.000004.otlp.jsonl.gz"],
     "pptrace-rank2-pid7.*.otlp.jsonl.gz (2 segments)"),
], ids=["none", "plain", "zstd", "rotated"])
def test_the_table_names_the_trace_as_it_is_on_disk(tmp_path: Path, files: list[str],
                                                    named: str) -> None:
    from pptrace_samples.pipeline import trace_written

    from pptrace.model.records import RankInfo

    for name in [*files, "pptrace-rank2-pid70.otlp.jsonl", "pptrace-rank3-pid7.otlp.jsonl"]:
        (tmp_path / name).write_text("")  # another process's files are not this one's
    assert trace_written(str(tmp_path), RankInfo(rank=2, pid=7)) == str(tmp_path / named)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_down_collector_costs_the_demo_only_otlp_s_copy_counted_in_one_line_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:
    """Found on main: with nothing listening the trace files lost events, the stats spans did
    not count OTLP's loss, and the SDK's own log lines reached the terminal."""
    from pptrace.export.ship_launch import STATE_NAME
    from pptrace.ship.state import ShipState
    from tests.helpers_reliability import read_trace_file

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)  # the default protocol
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    steps = 8
    with Receiver("json", "down") as rx:
        argv = ["--ranks", "2", "--steps", str(steps), "--out", str(tmp_path / "demo"),
                "--no-view", "--endpoint", rx.endpoint]
        # In a process of its own, as a user runs it: the demo's ranks come from a fork server,
        # and one forked from this pytest process inherits pytest's log capture, which swallows
        # the ranks' warnings (the line checked below) depending on which test started it.
        proc = subprocess.run([sys.executable, "-m", "pptrace", "demo", *argv],
                              capture_output=True, text=True, timeout=180,
                              env=child_env(PYTHONPATH=str(REPO)))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    out, err = proc.stdout, proc.stderr

    def text_of(_: object) -> str:
        return out + err

    files = sorted((tmp_path / "demo").glob("*.jsonl"))
    assert len(files) == 2
    in_files = 0
    for path in files:
        events, stats, bad = read_trace_file(str(path))
        last = stats[-1]
        # Every event is in the file or counted dropped by the recorder (whose overload rule
        # sheds on a starved machine, with or without OTLP: the SIGKILL promise). OTLP is
        # shipped from the files by the shipper process: the ranks claim no OTLP counts.
        assert last.final and bad == [] and last.recorded == steps, (last, text_of(capfd))
        assert len(events) == last.exported == steps - last.dropped, last
        assert last.sink_dropped == (), last
        in_files += len(events)
    # The shipper counted every event of the files as lost, said once, by cause.
    shipped = ShipState.load(str(tmp_path / "demo" / STATE_NAME)).totals()
    assert shipped["events_sent"] == 0 and shipped["events_lost"] == in_files, shipped
    text = out + err
    assert "Transient error" not in text and "Failed to export" not in text, text
    said = [ln for ln in text.splitlines() if ln.startswith("pptrace: OTLP shipper")]
    assert len(said) == 1 and "collector unreachable" in said[0], text
    assert f"OTLP: 0 events and 0 messages delivered, {in_files} events" in out, out
