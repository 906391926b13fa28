"""Every traced rank leaves its final stats, even with no call (issue 21, item 6).

In the TP-broadcast layout the last stage's TP rank 1 never calls attach; when it makes no other
traced call either, it used to write no file, and the analyzer, whose rule needs "traced, wrote
its final stats, never calls attach", reported ``missing-rank`` for a healthy run. Only a rank
writes such a file: a process that never loads the transport (a launcher), one that knows no
rank, and a fork that inherited its parent's rank write nothing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analyze
from pptrace.engines.sglang_load import ATTACH, EXTRACT, MODULE
from pptrace.load.loader import load_paths
from pptrace.model import schema
from tests.helpers_analyze import Run, meta, write_run
from tests.helpers_startup import BARE_SGLANG, PYTHON, REPO, child_env, run_pptrace

STEPS = 4

# The engine's script, started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK in each rank's
# environment): pp 2 x tp 2, SGLang's real transport imported by every rank, the TP-broadcast
# layout done with plain torch.distributed. Rank 3 (the last stage's TP rank 1) receives the
# broadcast and sends its copy: no traced call at all. Not a line of pptrace.
BROADCAST_ENGINE = BARE_SGLANG + f"""
import datetime, os
import torch
import torch.distributed as dist
from {MODULE} import {ATTACH} as attach, {EXTRACT} as extract


class Output:
    def __init__(self, named):
        self.named = named

    def to_pp_tensors(self):
        return self.named


class Observer:
    def from_pp_tensors(self, tensors):
        return Output(dict(tensors))


rank = int(os.environ["RANK"])
pp, tp = divmod(rank, 2)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
tp_group = [dist.new_group([0, 1]), dist.new_group([2, 3])][pp]
for step in range({STEPS}):
    box = [None]
    if pp == 1:
        if tp == 0:  # the last stage's TP rank 0 alone attaches
            tensors = {{"next_token_ids": torch.tensor([step, step + 1])}}
            attach(tensors, Output({{"scores": torch.full((2, 3), float(step))}}))
            box = [tensors]
        dist.broadcast_object_list(box, src=2, group=tp_group)  # broadcast_tensor_dict's role
        dist.send_object_list(box, dst=tp)  # each TP rank sends its copy to stage 0's
    else:
        dist.recv_object_list(box, src=2 + tp)
        out = extract(box[0], Observer())
        # One write a line: stage 0's two ranks share torchrun's stdout, and print() writes its
        # pieces separately when the output is unbuffered, so lines interleaved mid-line.
        os.write(1, f"result {{rank}} {{step}} {{float(out.named['scores'].sum())}}\\n".encode())
dist.barrier()
dist.destroy_process_group()
"""


def _stats_spans(path: Path) -> list[dict[str, object]]:
    spans = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            res = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    attrs = {a["key"]: a["value"] for a in span["attributes"]}
                    spans.append({"name": span["name"], **res, **attrs})
    return spans


@pytest.mark.slow
def test_a_rank_with_no_call_in_the_tp_broadcast_layout_leaves_its_final_stats(
        tmp_path: Path) -> None:
    script = tmp_path / "engine.py"
    script.write_text(BROADCAST_ENGINE)
    traces = tmp_path / "traces"
    proc = run_pptrace(
        ["--dir", str(traces), "--pp-size", "2", "--run-id", "bc1", "--",
         PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
         str(script)],
        child_env(PYTHONPATH=str(REPO)), tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = sorted(ln for ln in proc.stdout.splitlines() if ln.startswith("result"))
    expected = sorted(f"result {r} {s} {6.0 * s}" for r in (0, 1) for s in range(STEPS))
    assert results == expected, proc.stdout

    # Four ranks, four files: the idle rank's included, the torchrun launcher's not (it imports
    # torch.distributed, never the transport).
    files = sorted(traces.glob("pptrace-rank*-pid*.otlp.jsonl"))
    assert [f.name.split("-pid")[0] for f in files] == [f"pptrace-rank{r}" for r in range(4)]
    idle = _stats_spans(files[3])
    assert [s["name"] for s in idle] == [schema.SPAN_STATS]  # no event, only the final stats
    (stats,) = idle
    assert stats[schema.S_FINAL] == {"boolValue": True}
    assert (stats[schema.RANK], stats[schema.PP_RANK], stats[schema.TP_RANK]) == (
        {"intValue": "3"}, {"intValue": "1"}, {"intValue": "1"})
    # Zero events, as the reader reads the span (schema 3 leaves a zero counter out).
    (process,) = load_paths([str(files[3])]).processes
    assert process.stats is not None and process.stats.recorded == 0

    # The analyzer takes it as traced and complete: the TP-broadcast layout, no missing rank.
    assert [f.kind.value for f in analyze(load_paths([str(traces)]))] == []


# A process activated from code; argv: out_dir, then what it is ("rank": RANK/WORLD_SIZE set and
# torch.distributed imported; "rankless": neither; "fork": a rank that forks a child, as a
# data-loader worker is forked, that exits normally).
IDLE = BARE_SGLANG + f"""
import os, sys
import pptrace
pptrace.instrument(trace_dir=sys.argv[1])
import {MODULE}  # the transport loads: pptrace is armed; no call follows
if sys.argv[2] != "rankless":
    import torch.distributed
if sys.argv[2] == "fork":
    pid = os.fork()
    if pid == 0:
        import atexit
        atexit._run_exitfuncs()  # a normal exit in the child (its exit flush runs)
        os._exit(0)
    os.waitpid(pid, 0)
print("pid", os.getpid(), flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "env", "files"), [
    ("rank", {"RANK": "1", "WORLD_SIZE": "2", "PPTRACE_PP_SIZE": "2"}, 1),
    ("rankless", {}, 0),
    ("fork", {"RANK": "1", "WORLD_SIZE": "2", "PPTRACE_PP_SIZE": "2"}, 1),  # the parent's
])
def test_only_a_rank_writes_final_stats_without_a_call(
        tmp_path: Path, kind: str, env: dict[str, str], files: int) -> None:
    script = tmp_path / "idle.py"
    script.write_text(IDLE)
    out = tmp_path / "traces"
    proc = subprocess.run([PYTHON, str(script), str(out), kind], capture_output=True, text=True,
                          timeout=120, env=child_env(PYTHONPATH=str(REPO), **env))
    assert proc.returncode == 0, proc.stderr
    written = sorted(out.glob("*.otlp.jsonl")) if out.exists() else []
    assert len(written) == files, (written, proc.stderr)
    if files:
        (pid,) = [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("pid")]
        assert written[0].name == f"pptrace-rank1-pid{pid}.otlp.jsonl"  # not the fork's
        (stats,) = _stats_spans(written[0])
        assert stats[schema.S_FINAL] == {"boolValue": True}


def _quiet_rank_run(final: bool) -> Run:
    """pp 2 x tp 2 in the TP-broadcast layout; the last stage's TP rank 1 made no call and
    left only its stats span (final, or not: killed after a periodic flush)."""
    run = Run(pp_size=2, tp_size=2)
    for k in range(6):
        sent = [meta("scores", (k % 3 + 1, 5))]
        run.attach(sent, tp=0)
        for tp in (0, 1):
            run.extract(sent, tp=tp)
    run.set_stats(1, 1, final=final)  # recorded 0: nothing but the stats span
    return run


@pytest.mark.parametrize(("final", "kinds"), [(True, []), (False, ["missing-rank"])])
def test_a_file_of_final_stats_alone_is_a_traced_rank_that_made_no_call(
        tmp_path: Path, final: bool, kinds: list[str]) -> None:
    """The analyzer's rule, read from files as the recorder writes them: final stats and no
    call are a quiet TP rank of the broadcast layout; stats that are not final are no evidence
    (the rank may have attached after its last flush)."""
    paths = write_run(_quiet_rank_run(final), str(tmp_path))
    assert len(paths) == 4
    assert [f.kind.value for f in analyze(load_paths([str(tmp_path)]))] == kinds
    # Without its file, the same healthy run asks whether that rank was traced.
    Path(paths[3]).unlink()
    (f,) = analyze(load_paths([str(tmp_path)]))
    assert (f.kind.value, f.channel) == ("missing-rank", "pp0<-pp?/tp1")
    assert f.message.endswith("(was that rank traced?)")
