"""``pytest --pptrace``: every test's transport calls recorded, in every process it starts, judged.

Installed as a ``pytest11`` entry point, so any environment with pptrace has the options; nothing
changes unless a test is traced: with ``--pptrace`` (every test), the ``pptrace`` marker, or the
``pptrace_findings`` fixture. For a traced test (``pptrace.plugins.per_test``):

- while it runs (fixtures included), ``os.environ`` holds what ``pptrace run`` sets, with a folder
  and a run id of the test's own, so each Python process it starts records there; the pytest
  process is instrumented the moment a transport module loads in it, and forks carry that;
- when the test function returns, the folder is analyzed (so ranks are joined in the test, or in
  a fixture's setup, not in its teardown): findings at or above ``fail_on``
  (``--pptrace-fail-on``, default ``error``) fail the test, with ``pptrace analyze``'s messages
  and the folder named; a test that fails anyway keeps its failure and gets the report as a
  ``pptrace`` section; a test using ``pptrace_findings`` is never failed for them;
- the folder of a passing test is removed, unless ``--pptrace-dir DIR`` keeps them all.

    pytest --pptrace tests/test_pp.py
    pytest --pptrace --pptrace-fail-on warning --pptrace-dir ci-traces tests/
    pytest --pptrace --pptrace-target myengine.transport:send_aux,recv_aux@__aux__. tests/

    @pytest.mark.pptrace(fail_on="warning")      # this test's threshold
    @pytest.mark.pptrace(enabled=False)          # never traced, even under --pptrace

    def test_engine_error(pptrace_findings):     # the test judges its findings itself
        run_ranks(bad_output=True)
        assert [f.kind.value for f in pptrace_findings()] == ["attach-empty"]

A passing test whose trace is incomplete (a process that called the transport and ended
without pptrace's exit flush, as ``os._exit`` does; lost events; the test's own
``pptrace.instrument()``/``uninstrument()``) gets an ``IncompleteTrace`` warning saying why, and
the session's summary lists it; so it does a passing test whose removed folder a process still
running wrote again.

A failure inside pptrace never fails a test: it is said once, in the session's summary (only a
``pptrace_findings()`` call that cannot be answered fails its test, with the reason).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Generator
from typing import Any

import pytest

from pptrace.model.errors import ConfigError
from pptrace.model.findings import Finding, Severity
from pptrace.plugins.per_test import Case, Plan, Verdict

__all__ = ["Findings", "IncompleteTrace"]

_PLAN = pytest.StashKey[Plan]()
_CASE = pytest.StashKey[Case]()
_WANT = pytest.StashKey[tuple[bool, Severity | None]]()  # traced?, its own threshold
_OWN = pytest.StashKey[bool]()  # the test uses pptrace_findings: it judges its findings itself
_FAILED = pytest.StashKey[bool]()
_SEVERITIES = ("error", "warning", "info")
_MARKER = ("pptrace(fail_on='error', enabled=True): trace this test's transport calls with "
           "pptrace and fail it on findings at or above fail_on (enabled=False: never trace it)")


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``pptrace`` options."""
    group = parser.getgroup("pptrace", "pptrace: the auxiliary-output transport, traced per test")
    group.addoption("--pptrace", action="store_true", default=False,
                    help="record the transport calls of each test in every process it starts "
                         "and fail the test on pptrace's findings")
    group.addoption("--pptrace-fail-on", choices=_SEVERITIES, default="error",
                    help="fail a test on findings at least this severe (default: error)")
    group.addoption("--pptrace-dir", metavar="DIR", default=None,
                    help="keep each test's traces in DIR/<test> (default: a temporary folder "
                         "per test, removed when the test passes)")
    group.addoption("--pptrace-target", dest="pptrace_targets", action="append", default=[],
                    metavar="MODULE[:ATTACH,EXTRACT][@PREFIX]",
                    help="trace this transport module instead of SGLang's "
                         "(repeatable; as pptrace run --target)")


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; check the options (a bad one is a usage error, said on one line)."""
    config.addinivalue_line("markers", _MARKER)
    targets: tuple[Any, ...] = ()
    if config.getoption("pptrace_targets"):
        from pptrace.model.target import as_targets

        try:
            targets = as_targets(config.getoption("pptrace_targets"))
        except ConfigError as exc:
            raise pytest.UsageError(f"--pptrace-target: {exc}") from None
    if config.getoption("pptrace"):
        _check_environment()
    keep = config.getoption("pptrace_dir")
    config.stash[_PLAN] = Plan(fail_on=Severity.parse(config.getoption("pptrace_fail_on")),
                               root=keep, keep=keep is not None, targets=targets)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's temporary folder when no failing test left traces in it."""
    plan = config.stash.get(_PLAN, None)
    if plan is not None:
        plan.close()


def _check_environment() -> None:
    """The ``PPTRACE_*`` variables the tests' processes will read must be valid."""
    from pptrace.model.config import Config

    try:
        Config.from_env({**os.environ, "PPTRACE_ENABLED": "1"})
    except ConfigError as exc:
        raise pytest.UsageError(f"pytest --pptrace: {exc}") from None


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say that tests are traced, the threshold, and where the traces go."""
    if not config.getoption("pptrace"):
        return None
    plan = config.stash[_PLAN]
    where = (f"in {plan.root}/<test>" if plan.keep
             else "in a temporary folder per test, kept when the test fails")
    return f"pptrace: each test traced, failed on findings at or above " \
           f"{plan.fail_on.name.lower()}; traces {where}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Decide which tests are traced, and at what threshold (a bad marker: a usage error)."""
    for item in items:
        item.stash[_WANT] = _threshold(item)


def _threshold(item: pytest.Item) -> tuple[bool, Severity | None]:
    """Whether to trace ``item``, and its own threshold (from the marker)."""
    marker = item.get_closest_marker("pptrace")
    wanted = bool(item.config.getoption("pptrace")) or marker is not None or (
        "pptrace_findings" in getattr(item, "fixturenames", ()))
    if marker is None:
        return wanted, None
    unknown = sorted(set(marker.kwargs) - {"fail_on", "enabled"})
    if marker.args or unknown:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.pptrace takes fail_on= and "
                                f"enabled= only (got {marker.args or unknown})")
    fail_on = marker.kwargs.get("fail_on")
    if isinstance(fail_on, str):
        if fail_on.strip().lower() not in _SEVERITIES:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.pptrace(fail_on={fail_on!r}):"
                                    f" expected one of {', '.join(_SEVERITIES)}")
        fail_on = Severity.parse(fail_on)
    elif fail_on is not None and not isinstance(fail_on, Severity):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.pptrace(fail_on={fail_on!r}): "
                                f"expected one of {', '.join(_SEVERITIES)}")
    return wanted and bool(marker.kwargs.get("enabled", True)), fail_on


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> (
        Generator[None, object, object]):
    """Trace the test from its setup to its teardown; clean up after it."""
    wanted, fail_on = item.stash.get(_WANT, (False, None))
    if not wanted:
        return (yield)
    case = item.config.stash[_PLAN].case(item.nodeid, fail_on)
    item.stash[_CASE] = case
    item.stash[_FAILED] = False
    case.start()
    try:
        return (yield)
    finally:
        case.finish(passed=not item.stash[_FAILED])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> (
        Generator[None, pytest.TestReport, pytest.TestReport]):
    """Note a failing phase: its traces are kept, so that the failure can name them."""
    report = yield
    if _CASE in item.stash and report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    """After the test function: judge its traces; fail it, or add them to its own failure."""
    case = pyfuncitem.stash.get(_CASE, None)
    if case is None:
        return (yield)
    try:
        result = yield
    except (Exception, pytest.fail.Exception):  # not a skip, not an interrupt
        _add_section(pyfuncitem, case, case.judge())
        raise
    if pyfuncitem.stash.get(_OWN, False):  # the test judged its findings itself
        case.stop()
        return result
    verdict = case.judge()
    if verdict is not None and verdict.failing:
        pytest.fail(verdict.message(), pytrace=False)
    _warn_incomplete(verdict)
    return result


class IncompleteTrace(pytest.PytestWarning):
    """A traced test passed, but its trace is not the whole story (the reason is the text)."""


def _warn_incomplete(verdict: Verdict | None) -> None:
    """A passing test with an incomplete trace is never a silent pass: a warning says why (the
    session's summary lists them too)."""
    if verdict is not None:
        for line in verdict.incomplete:
            warnings.warn(IncompleteTrace(f"pptrace: incomplete trace: {line} "
                                          f"(traces in {verdict.directory})"), stacklevel=1)


def _add_section(item: pytest.Item, case: Case, verdict: Verdict | None) -> None:
    if verdict is not None and (verdict.events or verdict.findings):
        item.add_report_section("call", "pptrace", verdict.message())
    elif case.problem:
        item.add_report_section("call", "pptrace", f"pptrace could not judge this test: "
                                f"{case.problem}")


class Findings:
    """What the ``pptrace_findings`` fixture gives a test: its findings, on demand."""

    def __init__(self, case: Case) -> None:
        self._case = case

    @property
    def directory(self) -> str:
        """The test's trace folder."""
        return self._case.directory

    def __call__(self) -> tuple[Finding, ...]:
        """Analyze the test's traces now (this process's tracing ends); every finding."""
        verdict = self._case.judge()
        if verdict is None:
            pytest.fail(f"pptrace could not judge this test: {self._case.problem}",
                        pytrace=False)
        return verdict.findings

    def kinds(self) -> list[str]:
        """The kinds of the findings, earliest first (``["dtype-mismatch"]``)."""
        return [f.kind.value for f in self()]


@pytest.fixture
def pptrace_findings(request: pytest.FixtureRequest) -> Findings:
    """The test's own findings (call it once its ranks are done); pptrace then never fails it."""
    case = request.node.stash.get(_CASE, None)
    if case is None:
        pytest.fail("pptrace_findings: this test is not traced "
                    "(it is marked @pytest.mark.pptrace(enabled=False))", pytrace=False)
    request.node.stash[_OWN] = True
    return Findings(case)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    """Say each failure inside pptrace once, with the number of tests it left unjudged."""
    plan = config.stash.get(_PLAN, None)
    if plan is None:
        return
    rewritten = plan.rewritten()
    if not (plan.problems or plan.incomplete or rewritten):
        return
    terminalreporter.write_sep("-", "pptrace")
    for line, count in plan.problems.most_common():
        times = f" ({count} tests)" if count > 1 else ""
        terminalreporter.write_line(f"pptrace: {line}{times}")
    tests = len(dict.fromkeys(nodeid for nodeid, _ in plan.incomplete))
    if tests:
        terminalreporter.write_line(f"pptrace: {tests} test{'s' if tests != 1 else ''} with an "
                                    "incomplete trace:")
        for nodeid, line in plan.incomplete:
            terminalreporter.write_line(f"  {nodeid}: {line}")
    for nodeid, path in rewritten:
        terminalreporter.write_line(
            f"pptrace: {nodeid} passed and its traces were removed, but a process it started "
            f"went on recording after it ended and wrote {path} again (left there)")
