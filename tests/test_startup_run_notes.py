"""What ``pptrace run`` says once per run: where the traces went and what to run next, or why
nothing was traced; and how it refuses a bad target before the command starts."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

from pptrace.cli import run as run_cli
from pptrace.model.errors import ConfigError
from pptrace.model.target import DEFAULT_MODULE
from tests.helpers_startup import PYTHON, REPO, child_env, run_pptrace

OWN = '''PREFIX = "__sampling_observer_output__."


def send(tensors, output):
    for name, value in output.to_pp_tensors().items():
        tensors[PREFIX + name] = value


def recv(tensors, observer):
    return observer.from_pp_tensors({k: v for k, v in tensors.items()})
'''

RECORDS = '''import torch
from own_notes_transport import send


class Out:
    def to_pp_tensors(self):
        return {"a": torch.ones(2)}


send({}, Out())
'''


def _env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    (tmp_path / "own_notes_transport.py").write_text(OWN)
    (tmp_path / "records.py").write_text(RECORDS)
    return child_env(PYTHONPATH=str(REPO), TMPDIR=str(tmp_path / "tmp"))


def _said(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("pptrace")]


def _no_state_left(tmp_path: Path) -> bool:
    return list((tmp_path / "tmp").glob("pptrace-run-*")) == []


@pytest.mark.slow
def test_a_target_no_process_imports_is_named_once_at_the_end(tmp_path: Path) -> None:
    proc = run_pptrace(["--target", "never_imported_mod", "--", PYTHON, "-c", "pass"],
                       _env(tmp_path), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _said(proc.stderr) == [
        "pptrace: nothing traced: no process of this run imported never_imported_mod (the "
        "--target or PPTRACE_TARGETS modules pptrace waits for: is that what the command "
        "imports?)"]
    assert _no_state_left(tmp_path)


@pytest.mark.slow
def test_without_a_target_the_closing_line_names_sglang_and_target(tmp_path: Path) -> None:
    proc = run_pptrace(["--", PYTHON, "-c", "pass"], _env(tmp_path), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _said(proc.stderr) == [
        f"pptrace: nothing traced: no process of this run imported {DEFAULT_MODULE} (SGLang's "
        "transport module); to trace a transport module of your own: pptrace run --target "
        "MODULE[:ATTACH,EXTRACT][@PREFIX] -- COMMAND"]


@pytest.mark.slow
def test_a_target_loaded_but_never_called_is_said_so(tmp_path: Path) -> None:
    proc = run_pptrace(["--target", "own_notes_transport:send,recv", "--", PYTHON, "-c",
                        "import own_notes_transport"], _env(tmp_path), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _said(proc.stderr) == [
        "pptrace: nothing traced: 1 process loaded own_notes_transport, but none called "
        "own_notes_transport.send or own_notes_transport.recv"]
    assert _no_state_left(tmp_path)


@pytest.mark.slow
def test_when_the_command_is_not_python_the_first_recorder_says_where_once(
    tmp_path: Path,
) -> None:
    script = f"{PYTHON} records.py & {PYTHON} records.py & {PYTHON} records.py; wait"
    proc = run_pptrace(["--dir", "t", "--target", "own_notes_transport:send,recv", "--",
                        "sh", "-c", script], _env(tmp_path), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _said(proc.stderr) == ["pptrace: recording; traces in t; next: pptrace analyze t"]
    assert len(list((tmp_path / "t").glob("*.otlp.jsonl"))) == 3  # three recorders, one line


@pytest.mark.parametrize("bad", [["--target", "my-transport"], ["--target", "m:only_one"],
                                 ["--target", "m:a,b", "--target", "m:x,x"]])
def test_a_malformed_target_stops_pptrace_run_before_the_command(
    tmp_path: Path, bad: list[str]
) -> None:
    marker = tmp_path / "ran"
    proc = run_pptrace([*bad, "--", PYTHON, "-c", f"open({str(marker)!r}, 'w')"],
                       _env(tmp_path), tmp_path)
    assert proc.returncode == 2 and not marker.exists()
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert ("MODULE or MODULE:ATTACH,EXTRACT" in proc.stderr
            or "two different functions" in proc.stderr), proc.stderr
    assert proc.stderr.startswith("pptrace: error: ") and _no_state_left(tmp_path)


def test_a_malformed_pptrace_targets_stops_it_too(tmp_path: Path) -> None:
    env = _env(tmp_path) | {"PPTRACE_TARGETS": "a;b:c"}
    proc = run_pptrace(["--", PYTHON, "-c", "pass"], env, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == ("pptrace: error: PPTRACE_TARGETS='a;b:c': target 'b:c': expected "
                           "MODULE or MODULE:ATTACH,EXTRACT, optionally followed by @PREFIX, "
                           "with two function names after the colon (attach first)\n")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run_cli.add_parser(parser.add_subparsers())
    return parser.parse_args(["run", "--native-build", "off", *argv])  # no build from here


def test_targets_become_pptrace_targets(capsys: pytest.CaptureFixture[str]) -> None:
    args = _args("--print-env", "--target", "a", "--target", " b.c:send , recv ")
    assert run_cli.run(args) == 0
    assert "export PPTRACE_TARGETS='a;b.c:send,recv'" in capsys.readouterr().out.splitlines()
    env = run_cli.build_env(_args("--", "true"), {"PPTRACE_TARGETS": "x"})
    assert env["PPTRACE_TARGETS"] == "x"  # the environment's own, when no --target is given


def test_sglang_missing_is_said_by_the_launcher_naming_target(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pptrace.engines.select as select

    ran: list[dict[str, str]] = []
    monkeypatch.setattr(select, "module_status", lambda name: "absent")
    monkeypatch.setattr(run_cli, "_exec", lambda command, env: ran.append(dict(env)))
    monkeypatch.delenv("PPTRACE_TARGETS", raising=False)
    run_cli.run(_args("--", "true"))
    assert capsys.readouterr().err == (
        f"pptrace: no engine pptrace knows is installed for {sys.executable} (its transport "
        f"module {DEFAULT_MODULE} or an engine's message layer), so nothing is traced unless a "
        "process loads one; to trace a transport module of your own: pptrace run --target "
        "MODULE[:ATTACH,EXTRACT][@PREFIX] -- COMMAND\n")
    run_cli.run(_args("--target", "mine", "--", "true"))  # a target of one's own: not looked for
    assert capsys.readouterr().err == ""
    for env in ran:
        assert env["PPTRACE_RUN_PID"] == str(os.getpid())
        assert os.path.isdir(env["PPTRACE_RUN_STATE"])
        os.rmdir(env["PPTRACE_RUN_STATE"])


def test_a_command_that_cannot_start_leaves_no_state(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    with pytest.raises(ConfigError, match="no-such-command-xyz"):
        run_cli.run(_args("--target", "m", "--", "no-such-command-xyz"))
    assert list(tmp_path.glob("pptrace-run-*")) == []
