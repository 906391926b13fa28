"""Property: a healthy run with holes punched in its trace (records dropped and counted, or only
a sequence gap; a process killed at a random moment; its oldest events rotated away) never gives
an error-level finding. Runs built with the test factory, and one real gloo run of the sample
pipeline (slow). The seed of a failing example is in its message (``punch`` takes it)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pptrace.analyze.analyzer import analyze
from pptrace.model.findings import Severity
from pptrace.model.trace import Trace
from tests.helpers_analyze import Run, meta, mt
from tests.helpers_partial import healthy_trace_dir, punch

PROXY = [mt("hidden_states", (8, 16)), mt("residual", (8, 16))]


def _factory_run(pp: int, steps: int) -> Trace:
    """Both layers, healthy: proxies along the stages, the last stage's output (varying batch
    sizes) to stage 0 carrying its attach, stage 0's extract."""
    run = Run(pp_size=pp)
    for k in range(steps):
        n = 2 + k % 4
        for s in range(pp - 1):
            run.message("proxy", PROXY, frm=s, to=s + 1)
        aux = [meta("scores", (n, 5))]
        run.attach(aux)
        run.message("output", [mt("next_token_ids", (n,), "int64"), mt("scores", (n, 5))],
                    frm=pp - 1, to=0, carries=k)
        run.extract(aux)
    for stage in range(pp):  # the counts a real recorder's final stats give
        n, m = len(run.events.get((stage, 0), ())), len(run.msgs.get((stage, 0), ()))
        run.set_stats(stage, recorded=n, exported=n, messages_recorded=m, messages_exported=m)
    return run.trace()


def _errors(trace: Trace) -> list[str]:
    return [f"{f.kind.value}: {f.message}" for f in analyze(trace)
            if f.severity is Severity.ERROR]


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), pp=st.integers(2, 4), steps=st.integers(3, 24))
def test_holes_in_a_healthy_factory_run_give_no_error(seed: int, pp: int, steps: int) -> None:
    healthy = _factory_run(pp, steps)
    assert _errors(healthy) == []
    holed = punch(healthy, random.Random(seed))
    assert _errors(holed) == [], f"seed {seed}, pp {pp}, steps {steps}"


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_holes_in_a_real_healthy_run_give_no_error(seed: int) -> None:
    from pptrace.load.loader import load_paths

    healthy = load_paths([str(healthy_trace_dir())])
    assert healthy.processes and any(p.messages for p in healthy.processes)
    assert _errors(healthy) == []
    assert _errors(punch(healthy, random.Random(seed))) == [], f"seed {seed}"
