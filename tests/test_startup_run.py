"""``pptrace run``: every Python process of the tree is traced, spawned ranks included, with no
pptrace code in the engine's script; spans reach a real OTLP receiver over gRPC and HTTP."""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
from pathlib import Path

import pytest

from pptrace.cli.run import OTEL_DOC, add_parser, bootstrap_dir, build_env
from pptrace.engines.sglang_load import ATTACH, EXTRACT, MODULE
from pptrace.model import schema
from pptrace.model.config import ENV_DOC
from pptrace.model.errors import ConfigError
from tests.helpers_startup import BARE_SGLANG, PYTHON, REPO, child_env, run_pptrace
from tests.otlp_receiver import Receiver

STEPS = 3

# The engine's script: plain torch.distributed over gloo, ranks started with 'spawn', SGLang's
# real transport imported by name. Not a line of pptrace.
GLOO_ENGINE = BARE_SGLANG + f"""
import datetime, multiprocessing, sys


class Output:
    def __init__(self, named):
        self.named = named

    def to_pp_tensors(self):
        return self.named


class Observer:
    def from_pp_tensors(self, tensors):
        return Output(dict(tensors))


def rank_main(rank, store, steps):
    import torch
    import torch.distributed as dist
    from {MODULE} import {ATTACH} as attach, {EXTRACT} as extract

    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    for step in range(steps):
        if rank == 1:  # the last stage samples and attaches
            tensors = {{"next_token_ids": torch.tensor([step, step + 1])}}
            attach(tensors, Output({{"scores": torch.full((2, 3), float(step))}}))
            dist.send_object_list([tensors], dst=0)
        else:  # stage 0 extracts
            box = [None]
            dist.recv_object_list(box, src=1)
            out = extract(box[0], Observer())
            print("result", step, sorted(box[0]), float(out.named["scores"].sum()), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")  # as SGLang starts its rank processes
    procs = [ctx.Process(target=rank_main, args=(r, sys.argv[1], {STEPS})) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    sys.exit(max(abs(p.exitcode or 0) for p in procs))
"""


def _expected_results() -> list[str]:
    return [f"result {s} ['next_token_ids'] {6.0 * s}" for s in range(STEPS)]


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_gloo_run_under_pptrace_run_delivers_every_span_of_every_rank(
    tmp_path: Path, protocol: str
) -> None:
    script = tmp_path / "engine.py"
    script.write_text(GLOO_ENGINE)
    with Receiver(protocol) as rx:
        # Generous timeouts: this test is about delivery; the fault tests bound the time.
        env = child_env(PYTHONPATH=str(REPO), OTEL_EXPORTER_OTLP_TIMEOUT="10")
        proc = run_pptrace(
            ["--export", "file,otlp", "--exit-timeout", "20", "--dir", str(tmp_path / "traces"),
             "--pp-size", "2",
             "--protocol", rx.env_protocol, "--endpoint", rx.endpoint,
             "--service-name", "pptrace-test", "--run-id", "gloo1",
             "--", PYTHON, str(script), str(tmp_path / "store")],
            env, tmp_path)
        spans = rx.spans()
    assert proc.returncode == 0, proc.stderr
    assert [ln for ln in proc.stdout.splitlines() if ln.startswith("result")] == (
        _expected_results())
    # Nothing was lost, so the run's one closing line is all pptrace says, once for 3 processes.
    traces = tmp_path / "traces"
    assert proc.stderr.splitlines() == [
        f"pptrace: 2 processes recorded; traces in {traces} and spans sent over OTLP to "
        f"{rx.endpoint}; next: pptrace analyze {traces}"], proc.stderr

    # Schema version 2 keeps a process's constants (rank, run id, pid) on the resource; a span
    # carries one only where it differs. Read each span with its resource, as a reader does.
    events = [(res, {**res, **attrs}) for res, attrs, name in spans if name != schema.SPAN_STATS]
    by_rank = collections.Counter((a.get(schema.RANK), a.get(schema.PP_RANK),
                                   a[schema.DIRECTION]) for _, a in events)
    assert by_rank == {(1, 1, "attach"): STEPS, (0, 0, "extract"): STEPS}, proc.stderr
    for res, attrs in events:
        assert res["service.name"] == "pptrace-test"
        assert res[schema.RANK] == attrs[schema.RANK]
        assert attrs[schema.RUN_ID] == "gloo1" and attrs[schema.T_NAMES] == ["scores"]
    assert sorted(a[schema.SEQ] for _, a in events if a[schema.RANK] == 1) == list(range(STEPS))
    # two rank processes, neither the parent
    assert len({res["process.pid"] for res, _ in events}) == 2
    # File export ran beside OTLP: one file per rank process, nothing from the launcher.
    assert len(list((tmp_path / "traces").glob("pptrace-rank*-pid*.otlp.jsonl"))) == 2


SPAWN_ENGINE = BARE_SGLANG + f"""
import multiprocessing as mp
import os


def child(queue):
    import torch
    from {MODULE} import {ATTACH} as attach
    tensors = {{}}

    class Out:
        def to_pp_tensors(self):
            return {{"a": torch.ones(2)}}

    attach(tensors, Out())
    queue.put((os.getpid(), sorted(tensors), type(attach).__name__, attach.__name__))


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=child, args=(queue,)) for _ in range(2)]
    for p in procs:
        p.start()
    for _ in procs:
        print("child", *queue.get(timeout=60), flush=True)
    for p in procs:
        p.join(60)
    print("chained", os.environ.get("USER_SITECUSTOMIZE_RAN"), flush=True)
"""


@pytest.mark.slow
def test_spawned_children_are_instrumented_without_code_in_them(tmp_path: Path) -> None:
    script = tmp_path / "spawner.py"
    script.write_text(SPAWN_ENGINE)
    # The environment's own sitecustomize must still run (pptrace's chains to it).
    user_site = tmp_path / "usersite"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text(
        "import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = str(os.getpid())\n")
    env = child_env(PYTHONPATH=os.pathsep.join([str(REPO), str(user_site)]))
    proc = run_pptrace(["--dir", str(tmp_path / "traces"), "--run-id", "spawn1", "--",
                        PYTHON, str(script)], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    children = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("child")]
    assert len(children) == 2
    for _, _pid, key, _, name in children:
        assert key == "['__sampling_observer_output__.a']"
        assert name == ATTACH  # functools.wraps keeps the name: the engine sees no difference
    chained = [ln for ln in proc.stdout.splitlines() if ln.startswith("chained")]
    assert chained and chained[0] != "chained None"
    files = sorted((tmp_path / "traces").glob("*.jsonl"))
    pids = {int(c[1]) for c in children}
    assert {int(f.name.split("-pid")[1].split(".")[0]) for f in files} == pids
    for f in files:
        spans = [s for line in f.read_text().splitlines()
                 for rs in json.loads(line)["resourceSpans"]
                 for ss in rs["scopeSpans"] for s in ss["spans"]]
        assert [s["name"] for s in spans if s["name"] != schema.SPAN_STATS] == [
            schema.SPAN_ATTACH]


# What the bootstrap may import in a process that never loads a target module: pptrace's import
# hook and the target grammar (stdlib only; in the command's own process also the run's closing
# line; and the engine seam's declarations, stdlib-only data that names which modules to wait
# for). Not torch, not OpenTelemetry, not dataclasses (about 8 ms), not importlib.abc (about
# 7 ms), not the activation itself, never an engine.
BOOTSTRAP_ONLY = {"pptrace", "pptrace.activation", "pptrace.activation.hook", "pptrace.model",
                  "pptrace.model.errors", "pptrace.model.target", "pptrace.model.text",
                  "pptrace.activation.run_notes", "pptrace.engines", "pptrace.engines.spec",
                  "pptrace.engines.sglang", "pptrace.engines.vllm",
                  "pptrace.engines.coordinator"}  # the adapters' shared decoders: stdlib only
HEAVY = ("torch", "numpy", "opentelemetry", "textual", "grpc", "google", "dataclasses",
         "importlib.abc", "threading", "pptrace.activation.startup", "pptrace.record")


@pytest.mark.slow
def test_a_process_that_never_loads_the_engine_pays_only_an_import_hook(tmp_path: Path) -> None:
    probe = ("import json, sys, threading\n"  # the probe's own imports come after the check
             "print(json.dumps([sorted(sys.modules), threading.active_count(), "
             "[type(f).__name__ for f in sys.meta_path][:1]]))")
    probe = "import sys\nloaded = sorted(sys.modules)\n" + probe.replace(
        "sorted(sys.modules)", "loaded")
    proc = run_pptrace(["--dir", str(tmp_path / "t"), "--", PYTHON, "-c", probe],
                       child_env(PYTHONPATH=str(REPO)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    loaded, threads, first_finder = json.loads(proc.stdout.splitlines()[0])
    assert {m for m in loaded if m.startswith("pptrace")} <= BOOTSTRAP_ONLY
    assert "pptrace.activation.hook" in loaded  # the bootstrap did run
    assert [m for m in loaded if m.startswith(HEAVY)] == []
    assert threads == 1 and first_finder == ["ImportHook"]  # no thread; one hook, waiting
    assert not (tmp_path / "t").exists()  # and it writes nothing


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["run", *argv])


def test_build_env_sets_pptrace_and_otel_variables_and_the_bootstrap_path() -> None:
    args = _parse(["--protocol", "grpc", "--endpoint", "http://c:4317", "--mode", "flight",
                   "--exit-timeout", "0.5", "--", "python", "x.py"])
    env = build_env(args, {"PYTHONPATH": "/a:/b", "PATH": "/bin"})
    assert env["PYTHONPATH"].split(os.pathsep) == [bootstrap_dir(), "/a", "/b"]
    assert env["PPTRACE_ENABLED"] == "1" and env["PPTRACE_MODE"] == "flight"
    assert env["PPTRACE_EXPORT"] == "file,otlp"  # naming a collector means sending to it
    assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "grpc"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://c:4317"
    assert env["PPTRACE_EXIT_TIMEOUT"] == "0.5" and len(env["PPTRACE_RUN_ID"]) == 16
    assert args.command[-2:] == ["python", "x.py"]
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL='thrift'"):
        build_env(_parse(["--", "true"]), {"OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"})
    json_env = build_env(_parse(["--protocol", "http/json", "--", "true"]), {})
    assert json_env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/json"
    kept = build_env(_parse(["--", "true"]), {"PPTRACE_RUN_ID": "outer"})
    assert kept["PPTRACE_RUN_ID"] == "outer"  # a nested run keeps the outer run's id
    assert "PPTRACE_EXPORT" not in kept
    assert os.path.isfile(os.path.join(bootstrap_dir(), "sitecustomize.py"))


def test_help_lists_every_variable_and_print_env_and_bad_values(tmp_path: Path) -> None:
    out = subprocess.run([PYTHON, "-m", "pptrace.cli.run", "--help"], capture_output=True,
                         text=True, timeout=60, env=child_env(PYTHONPATH=str(REPO)))
    assert out.returncode == 0
    for name in [*ENV_DOC, *OTEL_DOC]:
        assert name in out.stdout, name
    printed = run_pptrace(["--print-env", "--mode", "flight"], child_env(PYTHONPATH=str(REPO)),
                          tmp_path)
    assert "export PPTRACE_MODE=flight" in printed.stdout and "PYTHONPATH=" in printed.stdout
    bad = run_pptrace(["--", "true"], child_env(PYTHONPATH=str(REPO), PPTRACE_MODE="turbo"),
                      tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "turbo" in bad.stderr
    missing = run_pptrace(["--", "no-such-command-xyz"], child_env(PYTHONPATH=str(REPO)),
                          tmp_path)
    assert missing.returncode == 2 and "no-such-command-xyz" in missing.stderr


def test_the_pptrace_command_has_run(capsys: pytest.CaptureFixture[str]) -> None:
    from pptrace.cli.main import main

    assert main(["run", "--print-env", "--export", "file,otlp"]) == 0
    out = capsys.readouterr().out
    assert "export PPTRACE_ENABLED=1" in out and "export PPTRACE_EXPORT=file,otlp" in out
    assert bootstrap_dir() in out
