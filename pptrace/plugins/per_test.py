"""One test's traces: what its processes inherit, this process's tracing, and the verdict.

The pytest plugin (``pptrace.plugins.pytest_plugin``) drives it; nothing here imports pytest.
While a test runs, ``os.environ`` holds what ``pptrace run`` would set (``PPTRACE_ENABLED=1``,
pptrace's bootstrap folder first on ``PYTHONPATH``, the test's own ``PPTRACE_DIR`` and
``PPTRACE_RUN_ID``, ``PPTRACE_TARGETS``), so every Python process the test starts (``spawn``,
``subprocess``, ``torchrun``) records into the test's folder. This process is instrumented
the moment a target module loads in it (at once when it is loaded already), so the calls the
test makes here are recorded too, and forked children carry that with them. When the test
function returns, the folder is loaded and analyzed.

    plan = Plan(fail_on=Severity.ERROR, root="/tmp/traces", keep=True)
    case = plan.case("tests/test_pp.py::test_dtype")
    case.start()              # the environment set; this process traced once the transport loads
    ...                       # the test runs
    verdict = case.judge()    # this process's tracing ends; the folder loaded and analyzed
    case.finish(passed=True)  # os.environ as it was; a passing test's temporary folder removed

A failure inside pptrace never reaches the test: ``judge`` returns ``None`` and the reason is
counted in ``Plan.problems`` (the plugin says each distinct one once, at the end).
"""

from __future__ import annotations

import collections
import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import types
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

from pptrace.model.findings import Finding, Severity
from pptrace.model.target import Target, format_targets

#: ``pptrace.activation.run_notes``'s folder of markers (not imported: activation loads torch's
#: side only once a test needs it).
STATE_ENV = "PPTRACE_RUN_STATE"


def _times_activated() -> int:
    startup = sys.modules.get("pptrace.activation.startup")
    return startup.times_activated() if startup is not None else 0

if TYPE_CHECKING:
    from pptrace.activation.hook import ImportHook

__all__ = ["Case", "Plan", "Verdict", "bootstrap_dir", "traced_env"]

# A trace file of pptrace's own (``pptrace.export.trace_file.trace_file_name``): what a test's
# kept folder is emptied of when the test runs again.
_OWN_TRACE = re.compile(r"pptrace-rank(?:\d+|X)-pid\d+\.otlp\.jsonl")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@cache
def bootstrap_dir() -> str:
    """The folder holding pptrace's ``sitecustomize.py`` (what ``pptrace run`` puts first)."""
    spec = importlib.util.find_spec("pptrace.activation._bootstrap")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pptrace's bootstrap folder (pptrace/activation/_bootstrap) is missing")
    return list(spec.submodule_search_locations)[0]


def traced_env(environ: Mapping[str, str], directory: str, run_id: str,
               targets: tuple[Target, ...] = ()) -> dict[str, str]:
    """The variables to set for a traced test (only those; ``environ`` is what is there now)."""
    bootstrap = bootstrap_dir()
    paths = [bootstrap] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep)
                           if p and p != bootstrap]
    env = {"PPTRACE_ENABLED": "1", "PPTRACE_DIR": directory, "PPTRACE_RUN_ID": run_id,
           "PYTHONPATH": os.pathsep.join(paths)}
    if targets:
        env["PPTRACE_TARGETS"] = format_targets(targets)
    exporters = environ.get("PPTRACE_EXPORT")
    if exporters is not None and "file" not in [e.strip() for e in exporters.split(",")]:
        # The verdict is read from the trace files: OTLP export may go on beside them.
        env["PPTRACE_EXPORT"] = ",".join(e for e in ("file", exporters.strip()) if e)
    return env


def _slug(nodeid: str) -> str:
    """A folder name for a test: readable, and distinct for distinct node ids."""
    digest = hashlib.sha1(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    text = _UNSAFE.sub("_", nodeid.replace("::", "__")).strip("._-")[-80:].lstrip("._-")
    return f"{text or 'test'}-{digest}"


class Verdict(NamedTuple):
    """What pptrace found in one test's traces."""

    directory: str  # the test's trace folder
    findings: tuple[Finding, ...]  # every finding, earliest first
    failing: tuple[Finding, ...]  # those at or above the test's threshold
    fail_on: Severity
    report: str  # ``pptrace analyze``'s text report of the folder
    events: int  # pptrace events read
    #: Why the trace is not the whole story, one line each (a process that ended without its
    #: exit flush, lost events, the test's own instrument()/uninstrument()); () when it is.
    incomplete: tuple[str, ...] = ()

    def headline(self) -> str:
        """One line: how many findings fail the test, and where the traces are."""
        n = len(self.failing)
        return (f"pptrace: {n} finding{'s' if n != 1 else ''} at or above "
                f"{self.fail_on.name.lower()} in this test's transport calls "
                f"(traces in {self.directory})")

    def message(self) -> str:
        """The headline, the report, and the command to look closer."""
        gaps = "".join(f"incomplete trace: {line}\n" for line in self.incomplete)
        return (f"{self.headline()}\n{gaps}{self.report}"
                f"to look closer: pptrace view {self.directory}")


@dataclass
class Plan:
    """The session's choices: the threshold, where traces go, the targets; what went wrong."""

    fail_on: Severity = Severity.ERROR
    root: str | None = None  # None: a temporary folder, made when a first test is traced
    keep: bool = False  # keep every test's traces (``--pptrace-dir``), not only failing ones
    targets: tuple[Target, ...] = ()
    problems: collections.Counter[str] = field(default_factory=collections.Counter)
    #: Tests whose traces were incomplete: (node id, why), in the order found.
    incomplete: list[tuple[str, str]] = field(default_factory=list)
    #: Passing tests' folders removed: a process still running may write one again.
    removed: list[tuple[str, str]] = field(default_factory=list)

    def folder(self) -> str:
        """The session's folder of test folders (made on first use)."""
        if self.root is None:
            self.root = tempfile.mkdtemp(prefix="pptrace-pytest-")
        return self.root

    def case(self, nodeid: str, fail_on: Severity | None = None) -> Case:
        """A test to trace (``fail_on``: the test's own threshold, else the session's)."""
        return Case(self, nodeid, self.fail_on if fail_on is None else fail_on)

    def problem(self, what: str, exc: BaseException, directory: str = "") -> str:
        """Count a failure inside pptrace; return its one line (the same for every test)."""
        line = f"{what}: {type(exc).__name__}: {exc}"
        if directory:
            line = line.replace(directory, "<the test's folder>")
        self.problems[line] += 1
        return line

    def rewritten(self) -> list[tuple[str, str]]:
        """(node id, folder) of each passing test whose removed folder exists again: a process
        the test started went on recording after the test ended."""
        return [(nodeid, path) for nodeid, path in self.removed if os.path.exists(path)]

    def close(self) -> None:
        """Remove the session's temporary folder when no test left traces in it."""
        if self.root is not None and not self.keep:
            try:
                os.rmdir(self.root)
            except OSError:  # a failing test's traces are in it: kept, and named
                pass


class Case:
    """One traced test: its folder, the environment it changed, this process's recorder."""

    def __init__(self, plan: Plan, nodeid: str, fail_on: Severity) -> None:
        self.plan = plan
        self.nodeid = nodeid
        self.fail_on = fail_on
        self.directory = ""
        self._saved: dict[str, str | None] = {}
        self._recorder: Any = None  # this process's recorder, when this case activated it
        self._hook: ImportHook | None = None  # waiting for a target module to load here
        self.problem = ""  # the failure inside pptrace that left this test unjudged
        self._state_dir = ""  # where this test's processes leave their called-PID markers
        self._asked = 0  # activations asked in this process before the test
        self._own_activation = 0  # those this case asked for
        self._by_test: list[str] = []  # what the test did to this process's tracing itself

    def _fail(self, what: str, exc: BaseException, *, unjudged: bool = True) -> None:
        line = self.plan.problem(what, exc, self.directory)
        if unjudged:
            self.problem = line

    def start(self) -> None:
        """Make the folder, set the environment, instrument this process."""
        try:
            self.directory = self._make_folder()
            env = traced_env(os.environ, self.directory, uuid.uuid4().hex[:16],
                             self.plan.targets)
            env[STATE_ENV] = self._state_dir = self._make_state()
            self._saved = {name: os.environ.get(name) for name in env}
            os.environ.update(env)
        except Exception as exc:
            self._fail("cannot set up this test's tracing", exc)
            self.restore()
            return
        self._asked = _times_activated()
        try:
            self._trace_here()
        except Exception as exc:
            # The test's other processes are still traced, and judged.
            self._fail("cannot trace the pytest process itself", exc, unjudged=False)

    def _trace_here(self) -> None:
        """Instrument this process once a target module is loaded (now, or when it loads).

        As pptrace's bootstrap does: a test that never loads the transport here costs an
        import hook, not an activation (whose restore sweeps every loaded module).
        """
        from pptrace.activation.hook import ImportHook
        from pptrace.model.target import parse_targets

        startup = sys.modules.get("pptrace.activation.startup")
        if startup is not None and startup.active_recorder() is not None:
            # pytest under ``pptrace run``, or a test that instruments pptrace itself.
            self.plan.problems["the pytest process is traced already (pptrace run?): its own "
                               "calls are in that trace, not in each test's"] += 1
            return
        modules = list(dict.fromkeys(t.module for t in parse_targets(
            os.environ.get("PPTRACE_TARGETS"))))
        if any(name in sys.modules for name in modules):
            self._activate()
        else:
            self._hook = ImportHook(modules, self._activate_on_import, once=True)
            self._hook.install()

    def _activate_on_import(self, module: types.ModuleType) -> None:
        try:
            self._activate()
        except Exception as exc:  # never into the test's import
            self._fail("cannot trace the pytest process itself", exc, unjudged=False)

    def _activate(self) -> None:
        from pptrace.activation.startup import instrument
        from pptrace.model.config import Config

        self._own_activation += 1
        self._recorder = instrument(Config.from_env())

    def _make_state(self) -> str:
        """A folder for the markers of the test's processes (``pptrace.activation.run_notes``),
        with a ``root`` marker: the test's processes then never print where traces go."""
        state = tempfile.mkdtemp(prefix="pptrace-state-")
        os.close(os.open(os.path.join(state, "root"), os.O_WRONLY | os.O_CREAT, 0o600))
        return state

    def _called(self) -> set[int]:
        """The pids of the test's processes that made a transport call (their markers)."""
        if not self._state_dir:
            return set()
        try:
            names = os.listdir(self._state_dir)
        except OSError:
            return set()
        return {int(n[7:]) for n in names if n.startswith("called-") and n[7:].isdigit()}

    def _make_folder(self) -> str:
        slug = _slug(self.nodeid)
        if not self.plan.keep:
            return tempfile.mkdtemp(prefix=slug[:90] + "-", dir=self.plan.folder())
        path = os.path.join(os.path.abspath(self.plan.folder()), slug)
        os.makedirs(path, mode=0o700, exist_ok=True)
        with os.scandir(path) as entries:  # an earlier run's traces of this test
            for entry in entries:
                if _OWN_TRACE.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    os.unlink(entry.path)
        return path

    def stop(self) -> None:
        """End this process's tracing, if this case started it (its last spans are written);
        note what the test itself did to it (``instrument()``/``uninstrument()``)."""
        hook, self._hook = self._hook, None
        if hook is not None:
            hook.remove()
        recorder, self._recorder = self._recorder, None
        asked_by_test = _times_activated() - self._asked - self._own_activation
        if recorder is None:
            if asked_by_test > 0:
                self._by_test.append(
                    "the test called pptrace.instrument() itself: the pytest process's calls "
                    "went to that recorder's trace, not this one")
            return
        try:
            from pptrace.activation.startup import active_recorder, uninstrument

            active = active_recorder()
            if active is recorder:
                uninstrument()
            elif active is None:
                self._by_test.append(
                    "the test called pptrace.uninstrument() itself: the pytest process's "
                    "transport calls after it are not in this trace")
            else:
                self._by_test.append(
                    "the test instrumented pptrace itself, with a recorder of its own: the "
                    "pytest process's calls went to that recorder's trace, not this one")
            if os.path.realpath(recorder.config.trace_dir) != os.path.realpath(self.directory):
                self._by_test.append(
                    "the test instrumented pptrace itself before the transport loaded: the "
                    "pytest process's calls went to its own trace folder, not this one")
            elif asked_by_test > 0:
                self._by_test.append(
                    "the test called pptrace.instrument() itself while this process was "
                    "traced: its configuration was not used (this process's calls are in this "
                    "trace, as the plugin set it up)")
        except Exception as exc:
            self._fail("cannot stop tracing the pytest process itself", exc, unjudged=False)

    def judge(self) -> Verdict | None:
        """Stop this process's tracing; load and analyze the folder (None: pptrace failed)."""
        self.stop()
        if not self.directory or self.problem:
            return None
        try:
            from pptrace.analyze.analyzer import analysis
            from pptrace.load.loader import load_paths
            from pptrace.report.text import render_text

            judged = analysis(load_paths([self.directory], allow_empty=True))
            trace, findings = judged.trace, judged.findings  # its times aligned
            failing = tuple(f for f in findings if f.severity >= self.fail_on)
            report = render_text(trace, findings, self.fail_on, clocks=judged.clocks)
            incomplete = self._gaps(trace)
        except Exception as exc:
            self._fail("cannot judge this test's traces", exc)
            return None
        for line in incomplete:
            self.plan.incomplete.append((self.nodeid, line))
        return Verdict(self.directory, findings, failing, self.fail_on, report, trace.event_count,
                       incomplete)

    def _gaps(self, trace: Any) -> tuple[str, ...]:
        """Why this test's trace is incomplete: each process that called the transport but has
        no final counts (it ended without pptrace's exit flush, or is still running), each that
        lost events, and what the test did to this process's tracing itself."""
        lines = list(self._by_test)
        by_pid = {p.rank.pid: p for p in trace.processes}
        for pid in sorted(self._called() | set(by_pid)):
            proc = by_pid.get(pid)
            stats = proc.stats if proc is not None else None
            if proc is None:
                lines.append(f"process {pid} called the transport but left no trace (it ended "
                             "without pptrace's exit flush: os._exit, a kill; or it is still "
                             "running)")
            elif stats is None or not stats.final:
                lines.append(f"process {pid} (rank {proc.rank.rank}) has no final counts (it "
                             "ended without pptrace's exit flush: os._exit, a kill; or it is "
                             "still running): its last events may be missing")
            elif stats.dropped:
                lines.append(f"process {pid} (rank {proc.rank.rank}) lost {stats.dropped} "
                             f"of its {stats.recorded} events")
        return tuple(lines)

    def restore(self) -> None:
        """Put back the variables this case set (idempotent)."""
        saved, self._saved = self._saved, {}
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def finish(self, passed: bool) -> None:
        """After the test: tracing stopped, environment restored, a passing test's traces gone."""
        self.stop()
        self.restore()
        if self._state_dir:
            shutil.rmtree(self._state_dir, ignore_errors=True)
        if passed and not self.plan.keep and self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.plan.removed.append((self.nodeid, self.directory))
