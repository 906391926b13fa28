"""Every fault of the sample pipeline is found, under the right kind, from its real trace files.

Each case runs the sample pipeline on gloo (2 ranks; 4 where the fault needs TP 2), loads the
per-rank files with ``pptrace.load.loader`` and analyzes them. The healthy run must give no finding.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pptrace_samples.faults import FAULTS
from pptrace_samples.launch import run_pipeline
from pptrace_samples.options import PipelineOptions

from pptrace.analyze.analyzer import analyze
from pptrace.load.loader import load_paths
from pptrace.model.findings import FindingKind, Severity

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

K = FindingKind

#: fault -> the kind it must be found under, and other kinds it may also cause.
EXPECTED: dict[str, tuple[FindingKind, frozenset[FindingKind]]] = {
    "composite-output": (K.ATTACH_NOT_PP, frozenset()),
    "empty-output": (K.ATTACH_EMPTY, frozenset()),
    "bad-name": (K.ATTACH_BAD_NAME, frozenset()),
    "non-tensor": (K.ATTACH_NOT_TENSOR, frozenset()),
    "duplicate": (K.ATTACH_DUPLICATE, frozenset()),
    "no-observer": (K.EXTRACT_NO_OBSERVER, frozenset()),
    "old-observer": (K.EXTRACT_NOT_PP, frozenset()),
    # The value no attach inserted is popped with the auxiliary output, and it is a list.
    "raw-prefixed-key": (K.EXTRACT_NOT_TENSOR, frozenset({K.PREFIXED_FOREIGN_KEY})),
    "observer-none": (K.EXTRACT_NOT_RECONSTRUCTED, frozenset()),
    # Stage 0 re-assembles a mix of both TP ranks' slices: the content changed in transit too,
    # and the message layer sees the same: slices that differ, a receive that differs.
    "tp-disagree": (K.TP_DISAGREE, frozenset({K.CONTENT_MISMATCH, K.MSG_SLICES_DIFFER,
                                              K.MSG_CONTENT_MISMATCH})),
    "overwrite-after-attach": (K.CONTENT_MISMATCH, frozenset()),
    "prefix-lookalike": (K.PREFIXED_FOREIGN_KEY, frozenset()),
    "reserved-name": (K.RESERVED_NAME, frozenset()),
    "shape-in-transit": (K.SHAPE_MISMATCH, frozenset()),
    "dtype-in-transit": (K.DTYPE_MISMATCH, frozenset()),
    "skipped-send": (K.ORPHAN_ATTACH, frozenset()),
}


def _run(tmp_path: Path, fault: str | None) -> list:  # type: ignore[type-arg]
    out = str(tmp_path / (fault or "healthy"))
    ranks = 4 if fault and FAULTS[fault].needs_tp > 1 else 2
    run_pipeline(PipelineOptions(out_dir=out, ranks=ranks, steps=6, fault=fault), timeout=90)
    return analyze(load_paths([out]))


def test_every_fault_has_an_expectation() -> None:
    assert set(EXPECTED) == set(FAULTS)


def test_healthy_run_gives_no_finding(tmp_path: Path) -> None:
    assert _run(tmp_path, None) == []


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_is_found_under_its_kind(tmp_path: Path, fault: str) -> None:
    kind, also = EXPECTED[fault]
    findings = _run(tmp_path, fault)
    kinds = {f.kind for f in findings}
    assert kind in kinds, [f.message for f in findings]
    # A crash leaves the attaches that were in flight without an extract: warnings, no more.
    # On the message layer the rank that raised stopped: its peer's receive waits for a message
    # it never sends (a hang, or a receive that raised when gloo saw the peer's connection close:
    # the run's timing decides which, CI saw both), and what it had sent last is never received.
    stopped = ({K.MSG_HANG, K.MSG_RAISED, K.MSG_NEVER_RECEIVED} if FAULTS[fault].raises
               else set())
    assert kinds <= {kind, K.ORPHAN_ATTACH} | also | stopped, [f.message for f in findings]
    first = next(f for f in findings if f.kind is kind)
    assert first.events and first.ranks and first.time_ns
    if kind is not K.ORPHAN_ATTACH:
        assert first.severity is Severity.ERROR
