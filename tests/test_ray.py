"""Ray: actors that load SGLang's transport, traced with a real local Ray (CPU, two actors).

SGLang can run its schedulers as Ray actors (``sglang/srt/ray/``). Here two actors form a 2-rank
gloo pipeline: the last stage attaches, the driver passes the dict on, stage 0 extracts. Shown:

- a local cluster that the driver starts under ``pptrace run`` inherits pptrace's variables:
  every actor is traced with no change to the driver;
- a cluster that was started without them (here: the one this test process starts, whose raylet
  has no ``PPTRACE_*``) traces nothing, until the job or the actor carries
  ``pptrace.activation.ray_env.runtime_env()``;
- each traced actor writes its own trace file, which the analyzer finds healthy;
- ``ray.kill`` runs no exit handler: what the actor recorded after its last background flush,
  and its final stats, are lost (as the module's docstring says).

One cluster for the in-process tests (``cluster``); the two driver runs start their own.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from pptrace.activation import ray_env
from pptrace.analyze.analyzer import analyze
from pptrace.cli.run import bootstrap_dir
from pptrace.load.loader import load_paths
from pptrace.model.errors import ConfigError
from pptrace.model.records import Direction
from tests.helpers_startup import PYTHON, REPO, child_env, run_pptrace

STEPS = 3


def make_stage() -> Any:
    """The actor class, made in a function so that Ray ships it by value (no import by name)."""

    @ray.remote(num_cpus=1)
    class Stage:
        """One PP rank of an engine run by Ray: it loads SGLang's transport as a scheduler does."""

        def __init__(self, rank: int, store: str) -> None:
            import importlib
            import importlib.util
            import sys
            import types

            if "sglang" not in sys.modules:  # the wheel without its GPU dependencies
                bare = types.ModuleType("sglang")
                bare.__path__ = list(importlib.util.find_spec("sglang").submodule_search_locations)
                sys.modules["sglang"] = bare
            self.transport = importlib.import_module("sglang.srt.sampling.sampling_observer_pp")
            self.rank, self.store = rank, store

        def state(self) -> dict[str, Any]:
            """This worker: its pid, whether pptrace wraps the transport, PPTRACE_ENABLED."""
            from pptrace.record.wrapper import is_wrapped

            attach = self.transport.add_auxiliary_output_to_pp_tensors
            return {"pid": os.getpid(), "traced": is_wrapped(attach),
                    "enabled": os.environ.get("PPTRACE_ENABLED")}

        def join(self) -> dict[str, Any]:
            import datetime

            import torch.distributed as dist

            dist.init_process_group("gloo", init_method="file://" + self.store, rank=self.rank,
                                    world_size=2, timeout=datetime.timedelta(seconds=60))
            return self.state()

        def attach(self, step: int) -> dict[str, Any]:
            import torch

            class Output:
                def to_pp_tensors(self) -> dict[str, torch.Tensor]:
                    return {"scores": torch.full((2, 3), float(step))}

            tensors = {"next_token_ids": torch.tensor([step, step + 1])}
            self.transport.add_auxiliary_output_to_pp_tensors(tensors, Output())
            return tensors

        def extract(self, tensors: dict[str, Any]) -> tuple[list[str], float]:
            class Observer:
                def from_pp_tensors(self, named: Any) -> dict[str, Any]:
                    return dict(named)

            out = self.transport.pop_auxiliary_output_from_pp_tensors(tensors, Observer())
            return sorted(tensors), float(out["scores"].sum())

        def close(self) -> None:
            import torch.distributed as dist

            dist.destroy_process_group()
            ray.actor.exit_actor()  # a graceful exit: the exit handlers (pptrace's flush) run

    return Stage


def run_pipeline(store: Path, options: dict[str, Any] | None = None, *,
                 end: str = "exit") -> list[dict[str, Any]]:
    """Two stages, STEPS microbatches; ``end``: "exit" (exit_actor) or "kill" (ray.kill)."""
    stage = make_stage()
    if options:
        stage = stage.options(**options)
    first, last = stage.remote(0, str(store)), stage.remote(1, str(store))
    joined = ray.get([first.join.remote(), last.join.remote()])
    results = [ray.get(first.extract.remote(last.attach.remote(step))) for step in range(STEPS)]
    assert results == [(["next_token_ids"], 6.0 * step) for step in range(STEPS)]
    if end == "kill":
        time.sleep(0.5)  # many background flushes: what the kill loses is the exit's part only
    for actor in (first, last):
        if end == "kill":
            ray.kill(actor)
        else:
            with pytest.raises(ray.exceptions.RayActorError):
                ray.get(actor.close.remote())
    for info in joined:
        _wait_gone(info["pid"])
    return joined


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"actor process {pid} still running after {timeout} s")


def check_traced(traces: Path, pids: list[int]) -> None:
    """One trace file per actor, each with its own direction only, and no finding."""
    files = sorted(p.name for p in traces.glob("pptrace-rank*-pid*.otlp.jsonl"))
    assert files == [f"pptrace-rank{rank}-pid{pid}.otlp.jsonl" for rank, pid in enumerate(pids)]
    trace = load_paths([str(traces)])
    seen = {(p.rank.pid, p.rank.pp_rank): sorted({ev.direction for ev in p.events})
            for p in trace.processes}
    assert seen == {(pids[0], 0): [Direction.EXTRACT], (pids[1], 1): [Direction.ATTACH]}
    assert trace.event_count == 2 * STEPS
    assert all(p.stats is not None and p.stats.final for p in trace.processes)
    assert analyze(trace) == []


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """A local Ray started by this process, whose environment has no pptrace variables."""
    assert "PPTRACE_ENABLED" not in os.environ
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_runtime_env_carries_what_pptrace_run_sets() -> None:
    env = ray_env.runtime_env({"pip": ["mypkg"], "env_vars": {"MINE": "1"}}, environ={
        "PPTRACE_EXPORT": "file,otlp", "OTEL_SERVICE_NAME": "engine", "HOME": "/root",
        "PPTRACE_RUN_PID": "7", "PPTRACE_RUN_STATE": "/tmp/x", "PPTRACE_RUN_ID": "r1"},
        dir="traces", pp_size=2, fingerprint=True, targets=["mytransport:send,recv"])
    assert env == {"pip": ["mypkg"], "env_vars": {
        "MINE": "1", "PPTRACE_EXPORT": "file,otlp", "OTEL_SERVICE_NAME": "engine",
        "PPTRACE_RUN_ID": "r1", "PPTRACE_DIR": os.path.abspath("traces"), "PPTRACE_PP_SIZE": "2",
        "PPTRACE_FINGERPRINT": "1", "PPTRACE_TARGETS": "mytransport:send,recv",
        "PPTRACE_ENABLED": "1", "PYTHONPATH": f"{bootstrap_dir()}{os.pathsep}${{PYTHONPATH}}"}}
    assert ray_env.bootstrap_dir() == bootstrap_dir()
    fresh = ray_env.runtime_env(environ={})["env_vars"]
    assert len(fresh["PPTRACE_RUN_ID"]) == 16 and fresh["PPTRACE_DIR"] == os.path.abspath(
        "pptrace-traces")
    kept = ray_env.runtime_env({"env_vars": {"PYTHONPATH": "/app"}}, environ={})["env_vars"]
    assert kept["PYTHONPATH"] == f"{bootstrap_dir()}{os.pathsep}/app"


@pytest.mark.parametrize(("settings", "message"), [
    ({"colour": "red"}, "runtime_env: unknown setting 'colour' (no variable PPTRACE_COLOUR; "
                        "pptrace run --help lists them)"),
    ({"run_state": "/x"}, "runtime_env: unknown setting 'run_state' (no variable "
                          "PPTRACE_RUN_STATE; pptrace run --help lists them)"),
    ({"pp_size": "two"}, "PPTRACE_PP_SIZE='two': expected an integer"),
    ({"targets": 3}, "targets 3: expected a spec string (MODULE or MODULE:ATTACH,EXTRACT, "
                     "optionally followed by @PREFIX), a Target, or several of them"),
])
def test_a_bad_setting_is_refused_in_one_line(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ray_env.runtime_env(environ={}, **settings)
    assert str(caught.value) == message


@pytest.mark.slow
def test_a_cluster_without_pptrace_variables_traces_nothing(
    cluster: None, tmp_path: Path
) -> None:
    actor = make_stage().remote(0, str(tmp_path / "store"))
    state = ray.get(actor.state.remote())
    ray.kill(actor)
    assert (state["traced"], state["enabled"]) == (False, None)


@pytest.mark.slow
def test_the_runtime_env_recipe_traces_each_actor_into_its_own_file(
    cluster: None, tmp_path: Path
) -> None:
    recipe = ray_env.runtime_env(dir=str(tmp_path / "traces"), pp_size=2)
    joined = run_pipeline(tmp_path / "store", {"runtime_env": recipe})
    assert [(j["traced"], j["enabled"]) for j in joined] == [(True, "1")] * 2
    check_traced(tmp_path / "traces", [j["pid"] for j in joined])


@pytest.mark.slow
def test_ray_kill_loses_what_was_not_flushed_and_the_final_stats(
    cluster: None, tmp_path: Path
) -> None:
    recipe = ray_env.runtime_env(dir=str(tmp_path / "traces"), pp_size=2, flush_interval=0.05)
    joined = run_pipeline(tmp_path / "store", {"runtime_env": recipe}, end="kill")
    trace = load_paths([str(tmp_path / "traces")])
    # The events flushed in the background (every 0.05 s) are there; no final stats span is.
    assert sorted(p.rank.pid for p in trace.processes) == sorted(j["pid"] for j in joined)
    assert trace.event_count == 2 * STEPS
    assert not any(p.stats is not None and p.stats.final for p in trace.processes)
    assert sorted(f.kind.value for f in analyze(trace)) == ["stats-not-final"] * 2


# The driver of the two driver runs: it starts its own local cluster.
DRIVER = """
import sys
import ray
from tests.test_ray import run_pipeline

{init}
joined = run_pipeline(sys.argv[1])
print("PIDS", " ".join(str(j["pid"]) for j in joined))
ray.shutdown()
"""
INIT = {
    # A driver unchanged: the cluster it starts inherits pptrace run's variables.
    "pptrace-run": "ray.init(num_cpus=2, include_dashboard=False)",
    # The recipe, as a driver written for a cluster that does not inherit them puts it.
    "runtime_env": "from pptrace.activation.ray_env import runtime_env\n"
                   "ray.init(num_cpus=2, include_dashboard=False, runtime_env=runtime_env("
                   "dir=sys.argv[2], pp_size=2))",
}


@pytest.mark.slow
@pytest.mark.parametrize("route", ["pptrace-run", "runtime_env"])
def test_a_driver_that_starts_its_own_cluster_gets_its_actors_traced(
    route: str, tmp_path: Path
) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(init=INIT[route]))
    traces = tmp_path / "traces"
    args = [PYTHON, str(script), str(tmp_path / "store"), str(traces)]
    env = child_env(PYTHONPATH=str(REPO), PPTRACE_NATIVE="0")
    if route == "pptrace-run":
        proc = run_pptrace(["--dir", str(traces), "--pp-size", "2", "--", *args], env, tmp_path)
    else:
        proc = subprocess.run(args, env=env, cwd=str(tmp_path), capture_output=True, text=True,
                              timeout=120)
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("PIDS ")]
    check_traced(traces, [int(pid) for pid in line.split()[1:]])
