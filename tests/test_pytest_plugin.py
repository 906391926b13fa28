"""``pytest --pptrace``: real pytest runs (pytester, in a subprocess) of an engine's own tests.

The inner test files are what an engine's CI has: 2 gloo ranks (``torch.multiprocessing`` spawn,
and fork) running SGLang's real transport module, rank 1 (the last stage) attaching and rank 0
(stage 0) extracting, healthy or with a silent fault (the dict arrives float16; a name changed on
the way) that the test itself cannot see; an engine error the test expects; tests in the pytest
process itself. The plugin is found through its ``pytest11`` entry point, as a user gets it.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from pathlib import Path

import pytest

from pptrace.model.findings import Severity
from pptrace.model.target import Target
from pptrace.plugins.per_test import Plan, bootstrap_dir, traced_env

pytest_plugins = ["pytester"]

RANKS = '''
"""2 gloo ranks through SGLang's real transport: rank 1 (last stage) attaches, rank 0 extracts."""
import datetime
import multiprocessing

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pptrace.engines.sglang_load import load_transport_module

STEPS = 2


class Output:
    def __init__(self, named):
        self.named = named

    def to_pp_tensors(self):
        return self.named


class Observer:
    def from_pp_tensors(self, tensors):
        return Output(dict(tensors))


def rank_main(rank, store, fault):
    mod = load_transport_module(allow_bare=True)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=30))
    for step in range(STEPS):
        if rank == 1:
            tensors = {"next_token_ids": torch.tensor([step, step + 1])}
            if fault == "engine-error":  # the engine refuses an empty output, as the test wants
                with pytest.raises(RuntimeError):
                    mod.add_auxiliary_output_to_pp_tensors(tensors, Output({}))
            scores = torch.full((2, 3), float(step))
            mod.add_auxiliary_output_to_pp_tensors(tensors, Output({"scores": scores}))
            if fault == "float16":  # the send path casts floating tensors
                tensors = {k: v.half() if v.is_floating_point() else v for k, v in tensors.items()}
            if fault == "renamed":  # a name changes on the way
                tensors = {k.replace("scores", "logits"): v for k, v in tensors.items()}
            dist.send_object_list([tensors], dst=0)
        else:
            box = [None]
            dist.recv_object_list(box, src=1)
            out = mod.pop_auxiliary_output_from_pp_tensors(box[0], Observer())
            assert sorted(box[0]) == ["next_token_ids"]
            (values,) = out.named.values()
            assert float(values.float().sum()) == 6.0 * step  # true whatever the name or dtype
    dist.barrier()
    dist.destroy_process_group()


def run_ranks(tmp_path, fault="", start="spawn"):
    store = str(tmp_path / "store")
    if start == "spawn":
        mp.spawn(rank_main, args=(store, fault), nprocs=2, join=True)
        return
    ctx = multiprocessing.get_context(start)
    procs = [ctx.Process(target=rank_main, args=(r, store, fault)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]


def test_healthy(tmp_path):
    run_ranks(tmp_path)


def test_float16(tmp_path):
    run_ranks(tmp_path, "float16")


def test_renamed(tmp_path):  # forked ranks (quicker): they carry the pytest process's tracing
    run_ranks(tmp_path, "renamed", start="fork")


def test_forked_float16(tmp_path):
    run_ranks(tmp_path, "float16", start="fork")


def test_engine_error_expected(tmp_path, pptrace_findings):
    run_ranks(tmp_path, "engine-error", start="fork")
    assert pptrace_findings.kinds() == ["attach-empty"]
'''

# Tests in the pytest process itself: the transport imported at collection, as a unit test does.
IN_PROCESS = '''
import os

import pytest
import torch

from pptrace.engines.sglang_load import load_transport_module

mod = load_transport_module(allow_bare=True)
ORIGINAL = {k: v for k, v in os.environ.items() if k.startswith("PPTRACE_") or k == "PYTHONPATH"}


class Output:
    def __init__(self, named):
        self.named = named

    def to_pp_tensors(self):
        return self.named


def attach_a_list():  # the engine refuses it: attach-not-tensor, an error
    with pytest.raises(RuntimeError, match="is not a tensor"):
        mod.add_auxiliary_output_to_pp_tensors({}, Output({"scores": [1.0, 2.0]}))


def attach_only():  # no stage 0 in this test: missing-rank, a warning
    mod.add_auxiliary_output_to_pp_tensors({}, Output({"scores": torch.ones(2)}))


def test_sees_the_traced_environment():
    folder = os.environ["PPTRACE_DIR"]
    assert os.environ["PPTRACE_ENABLED"] == "1" and os.path.isdir(folder)
    first = os.environ["PYTHONPATH"].split(os.pathsep)[0]
    assert os.path.isfile(os.path.join(first, "sitecustomize.py"))
    assert len(os.environ["PPTRACE_RUN_ID"]) == 16
    with open("passing_folder.txt", "w") as f:
        f.write(folder)


def test_engine_error_unexpected():
    attach_a_list()


def test_fails_by_itself():
    attach_a_list()
    assert False, "the test's own failure"


def test_warning_passes_at_error():
    attach_only()


@pytest.mark.pptrace(fail_on="warning")
def test_warning_fails_at_warning():
    attach_only()


@pytest.mark.pptrace(enabled=False)
def test_not_traced_when_disabled():
    attach_a_list()
    assert "PPTRACE_ENABLED" not in os.environ


@pytest.mark.pptrace(enabled=False)
def test_environment_restored_after_each_test():
    now = {k: v for k, v in os.environ.items() if k.startswith("PPTRACE_") or k == "PYTHONPATH"}
    assert now == ORIGINAL
'''

HEADLINE = re.compile(r"pptrace: (\d+) findings? at or above (\w+) in this test's transport "
                      r"calls \(traces in (\S+)\)")


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester whose runs see no pptrace settings of this process (the native dir aside)."""
    for name in list(os.environ):
        if name.startswith(("PPTRACE_", "OTEL_")) and name != "PPTRACE_NATIVE_DIR":
            monkeypatch.delenv(name)
    # Its own temporary directory: the plugin keeps a failing test's traces in a folder made
    # there (the inner runs' failing tests are on purpose), removed with pytester's.
    tmp = pytester.path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    return pytester


def headlines(result: pytest.RunResult) -> dict[str, tuple[int, str, Path]]:
    """Each failing test's pptrace headline: (findings, threshold, trace folder), by test."""
    found: dict[str, tuple[int, str, Path]] = {}
    test = ""
    for line in result.outlines:
        if m := re.fullmatch(r"_+ (test_\w+) _+", line):
            test = m[1]
        elif m := HEADLINE.fullmatch(line):
            found.setdefault(test, (int(m[1]), m[2], Path(m[3])))
    return found


def block(result: pytest.RunResult, test: str) -> str:
    """The failure section of one test in the run's output."""
    text = result.stdout.str()
    start = re.search(rf"^_+ {test} _+$", text, re.M)
    assert start is not None, text[-3000:]
    end = re.search(r"^(_+ test_\w+ _+|=+ .* =+)$", text[start.end():], re.M)
    return text[start.end(): start.end() + end.start() if end else None]


def test_the_plugin_is_a_pytest11_entry_point() -> None:
    points = importlib.metadata.entry_points(group="pytest11")
    assert [p.value for p in points if p.name == "pptrace"] == ["pptrace.plugins.pytest_plugin"]


@pytest.mark.slow
def test_gloo_ranks_a_silent_fault_fails_its_test_naming_the_finding_and_the_traces(
    inner: pytest.Pytester,
) -> None:
    inner.makepyfile(test_pp=RANKS)
    keep = inner.path / "kept"
    result = inner.runpytest_subprocess("--pptrace", "--pptrace-dir", str(keep), "-v",
                                        "-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines(["pptrace: each test traced, failed on findings at or above "
                                 f"error; traces in {keep}/<test>"])
    found = headlines(result)
    assert sorted(found) == ["test_float16", "test_forked_float16", "test_renamed"]
    float16 = ("rank 1 attached `scores` float32[2, 3]; rank 0 extracted float16[2, 3]")
    for test, kind, says in [("test_float16", "dtype-mismatch", float16),
                             ("test_forked_float16", "dtype-mismatch", float16),
                             ("test_renamed", "names-differ",
                              "rank 1 attached `scores`; rank 0 extracted `logits`")]:
        count, threshold, folder = found[test]
        assert (count, threshold, folder.parent) == (1, "error", keep)
        text = block(result, test)
        assert f"First divergence (error, {kind}):" in text and says in text, text
        assert f"to look closer: pptrace view {folder}" in text
        # One trace file per rank process (the pytest process made no transport call).
        assert sorted(p.name.split("-pid")[0] for p in folder.iterdir()) == [
            "pptrace-rank0", "pptrace-rank1"], test
    result.stdout.fnmatch_lines(["FAILED test_pp.py::test_float16 - Failed: pptrace: 1 finding*"])
    # The healthy test and the expected engine error pass; --pptrace-dir keeps their traces.
    for test in ("test_healthy", "test_engine_error_expected"):
        assert any(ln.startswith(f"test_pp.py::{test} PASSED") for ln in result.outlines)
        (folder,) = [p for p in keep.iterdir() if p.name.startswith(f"test_pp.py__{test}-")]
        assert len(list(folder.glob("pptrace-rank*-pid*.otlp.jsonl"))) == 2
    assert "pptrace could not judge" not in result.stdout.str()


@pytest.mark.slow
def test_in_process_tests_thresholds_markers_sections_and_the_environment(
    inner: pytest.Pytester,
) -> None:
    inner.makepyfile(test_in=IN_PROCESS)
    result = inner.runpytest_subprocess("--pptrace", "-v", "-p", "no:cacheprovider",
                                        timeout=120)
    result.assert_outcomes(passed=4, failed=3)
    found = headlines(result)
    # An engine error the test swallowed fails it; so does a warning under fail_on="warning".
    assert {t: (n, sev) for t, (n, sev, _) in found.items()} == {
        "test_engine_error_unexpected": (1, "error"),
        "test_fails_by_itself": (1, "error"),
        "test_warning_fails_at_warning": (1, "warning")}
    assert "attach-not-tensor" in block(result, "test_engine_error_unexpected")
    assert "missing-rank" in block(result, "test_warning_fails_at_warning")
    # A test that fails anyway keeps its own failure; pptrace's report is a section of it.
    own = block(result, "test_fails_by_itself")
    assert "AssertionError: the test's own failure" in own
    assert own.index("AssertionError") < own.index("Captured pptrace call")
    assert "First divergence (error, attach-not-tensor):" in own
    result.stdout.fnmatch_lines(["FAILED test_in.py::test_fails_by_itself - AssertionError*"])
    # A failing test's traces are kept (one file: this process's); a passing test's are gone.
    for _, _, folder in found.values():
        assert [p.name.split("-pid")[0] for p in folder.iterdir()] == ["pptrace-rankX"]
    assert not Path((inner.path / "passing_folder.txt").read_text()).exists()


@pytest.mark.slow
def test_without_the_option_nothing_is_traced(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_in=IN_PROCESS)
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "-k",
                                        "engine_error_unexpected or restored or disabled",
                                        timeout=120)
    result.assert_outcomes(passed=3, deselected=4)
    assert [ln for ln in result.outlines if ln.startswith("pptrace")] == []


@pytest.mark.slow
def test_another_target_and_fail_on_warning(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_ref='''
import torch
from pptrace.record import engine
from pptrace.engines.sglang_load import load_transport_module

sglang = load_transport_module(allow_bare=True)


class Output:
    def to_pp_tensors(self):
        return {"scores": torch.ones(2)}


def test_reference_transport_attach_only():
    engine.add_auxiliary_output_to_pp_tensors({}, Output())


def test_sglang_is_not_a_target_now():
    sglang.add_auxiliary_output_to_pp_tensors({}, Output())
''')
    result = inner.runpytest_subprocess("--pptrace", "--pptrace-fail-on", "warning",
                                        "--pptrace-target", "pptrace.record.engine",
                                        "-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=1, failed=1)
    assert {t: (n, sev) for t, (n, sev, _) in headlines(result).items()} == {
        "test_reference_transport_attach_only": (1, "warning")}


ROUND_TRIP = '''
"""An engine's own unit test of its transport: attach and extract in this one process."""
import torch

from pptrace.engines.sglang_load import load_transport_module

mod = load_transport_module(allow_bare=True)


class Output:
    def __init__(self, named):
        self.named = named

    def to_pp_tensors(self):
        return self.named


class Observer:
    def from_pp_tensors(self, tensors):
        return Output(dict(tensors))


def round_trip(on_the_way):
    for step in range(3):
        tensors = {"next_token_ids": torch.tensor([step])}
        mod.add_auxiliary_output_to_pp_tensors(tensors, Output({"scores": torch.ones(2, 3)}))
        tensors = {k: on_the_way(v) for k, v in tensors.items()}
        out = mod.pop_auxiliary_output_from_pp_tensors(tensors, Observer())
        assert float(out.named["scores"].float().sum()) == 6.0  # true whatever the dtype


def test_round_trip_healthy():
    round_trip(lambda v: v)


def test_round_trip_float16():
    round_trip(lambda v: v.half() if v.is_floating_point() else v)
'''


@pytest.mark.slow
def test_a_round_trip_in_one_process_is_paired_with_itself(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_round_trip=ROUND_TRIP)
    result = inner.runpytest_subprocess("--pptrace", "-v", "-p", "no:cacheprovider",
                                        timeout=120)
    result.assert_outcomes(passed=1, failed=1)
    found = headlines(result)
    assert {t: (n, sev) for t, (n, sev, _) in found.items()} == {
        "test_round_trip_float16": (1, "error")}
    text = block(result, "test_round_trip_float16")
    assert "First divergence (error, dtype-mismatch):" in text, text
    assert "attached `scores` float32[2, 3];" in text and "extracted float16[2, 3]" in text
    assert "agrees" not in result.stdout.str()


@pytest.mark.slow
def test_a_failure_inside_pptrace_is_said_once_and_fails_no_test(inner: pytest.Pytester) -> None:
    inner.makeconftest('''
import pptrace.analyze.analyzer

def _broken(trace, **options):
    raise RuntimeError("the analyzer broke")

pptrace.analyze.analyzer.analysis = _broken  # what the plugin calls
''')
    inner.makepyfile(test_in=IN_PROCESS)
    result = inner.runpytest_subprocess("--pptrace", "-p", "no:cacheprovider", "-k",
                                        "unexpected or passes_at_error", timeout=120)
    result.assert_outcomes(passed=2, deselected=5)
    said = [ln for ln in result.outlines if "the analyzer broke" in ln]
    assert said == ["pptrace: cannot judge this test's traces: RuntimeError: the analyzer broke "
                    "(2 tests)"], result.stdout.str()


@pytest.mark.slow
@pytest.mark.parametrize(("args", "source", "says"), [
    (["--pptrace-target", "no such module"], "def test_x():\n    pass\n",
     "ERROR: --pptrace-target: *"),
    (["--pptrace"], "import pytest\n\n@pytest.mark.pptrace(fail_on='loud')\ndef test_x():\n"
     "    pass\n", "ERROR: test_bad.py::test_x: @pytest.mark.pptrace(fail_on='loud'): expected "
     "one of error, warning, info"),
], ids=["a malformed target", "a bad marker"])
def test_a_bad_option_or_marker_is_a_one_line_usage_error(
    inner: pytest.Pytester, args: list[str], source: str, says: str,
) -> None:
    inner.makepyfile(test_bad=source)
    result = inner.runpytest_subprocess(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([says])
    assert "Traceback" not in result.stderr.str()


@pytest.mark.slow
def test_a_bad_pptrace_variable_is_a_usage_error(inner: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PPTRACE_MODE", "loud")
    inner.makepyfile(test_ok="def test_x():\n    pass\n")
    result = inner.runpytest_subprocess("--pptrace", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest --pptrace: *mode*loud*"])


# --- the per-test pieces, without pytest runs --------------------------------------------------

def test_the_traced_environment_puts_the_bootstrap_first_once() -> None:
    boot = bootstrap_dir()
    assert os.path.isfile(os.path.join(boot, "sitecustomize.py"))
    env = traced_env({"PYTHONPATH": os.pathsep.join(["/a", boot, "/b"]), "PPTRACE_EXPORT": "otlp"},
                     "/t/dir", "r1", (Target("mytransport", "send", "recv"),))
    assert env == {"PPTRACE_ENABLED": "1", "PPTRACE_DIR": "/t/dir", "PPTRACE_RUN_ID": "r1",
                   "PYTHONPATH": os.pathsep.join([boot, "/a", "/b"]),
                   "PPTRACE_TARGETS": "mytransport:send,recv", "PPTRACE_EXPORT": "file,otlp"}
    assert "PPTRACE_EXPORT" not in traced_env({"PPTRACE_EXPORT": "file"}, "/t", "r")
    assert "PPTRACE_TARGETS" not in traced_env({}, "/t", "r")


def test_a_case_restores_the_environment_and_clears_only_its_own_old_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/before")
    monkeypatch.delenv("PPTRACE_DIR", raising=False)
    plan = Plan(fail_on=Severity.WARNING, root=str(tmp_path), keep=True)
    case = plan.case("tests/test_x.py::test_y[a/b]")
    other = plan.case("tests/test_x.py::test_y[a_b]")  # another test: another folder
    other.start()
    other.finish(passed=True)
    case.start()
    try:
        assert Path(case.directory).parent == tmp_path and case.directory != other.directory
        assert Path(case.directory).name.startswith("tests_test_x.py__test_y_a_b-")
        assert os.environ["PPTRACE_DIR"] == case.directory
        assert os.environ["PYTHONPATH"] == os.pathsep.join([bootstrap_dir(), "/before"])
        (Path(case.directory) / "pptrace-rank0-pid1.otlp.jsonl").write_text("old")
        (Path(case.directory) / "notes.txt").write_text("the user's")
    finally:
        case.finish(passed=True)
    assert os.environ["PYTHONPATH"] == "/before" and "PPTRACE_DIR" not in os.environ
    again = plan.case("tests/test_x.py::test_y[a/b]")
    again.start()
    again.finish(passed=True)
    assert sorted(p.name for p in Path(again.directory).iterdir()) == ["notes.txt"]
    verdict = again.judge()
    assert verdict is not None and (verdict.findings, verdict.events) == ((), 0)
    assert plan.problems == {}
