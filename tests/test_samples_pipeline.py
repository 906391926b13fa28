"""The sample pipeline on real gloo processes: the healthy run and every injectable fault.

Each run reads back the per-rank trace files the rank processes wrote. The first run pays for
the fork server's imports (a few seconds); every later run forks ranks from it in milliseconds.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pptrace_samples.faults import FAULTS, FIRST, LAST
from pptrace_samples.launch import run_pipeline
from pptrace_samples.options import (
    EXIT_ENGINE_ERROR,
    EXIT_OK,
    EXIT_PEER_LOST,
    EXIT_TERMINATED,
    PipelineOptions,
)

from pptrace.model.records import PREFIX, Direction, Event
from tests.helpers_samples import TraceFiles, finding_kinds, run_sample

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

STEPS = 6
AT = 2  # the forward a fault first applies to (PipelineOptions.fault_at)
AUX = ["topk_logprobs", "topk_ids", "entropy"]

RAISING = sorted(name for name, f in FAULTS.items() if f.raises)
SILENT = sorted(name for name, f in FAULTS.items() if not f.raises)


def _stage_ranks(pp_rank: int, tp: int) -> list[int]:
    return [pp_rank * tp + i for i in range(tp)]


def _assert_pairs_agree(attaches: list[Event], extracts: list[Event]) -> None:
    """Attach j on the last stage and extract j on stage 0 carry the same payload."""
    assert len(attaches) == len(extracts)
    for att, ext in zip(attaches, extracts, strict=True):
        assert att.seq == ext.seq
        assert att.ok and ext.ok
        assert att.names == ext.names == tuple(AUX)
        assert [t.shape for t in att.tensors] == [t.shape for t in ext.tensors]
        assert [t.dtype for t in att.tensors] == [t.dtype for t in ext.tensors]
        assert [t.device_type for t in att.tensors] == [t.device_type for t in ext.tensors]
        assert [t.fingerprint for t in att.tensors] == [t.fingerprint for t in ext.tensors]
        assert all(t.fingerprint for t in att.tensors)
        assert not any(k.startswith(PREFIX) for k in ext.keys_after)


def test_healthy_pipeline_four_stages(tmp_path: Path) -> None:
    out = str(tmp_path / "healthy")
    result, traces = run_sample(out, ranks=4, steps=STEPS)
    assert result.exit_codes == (EXIT_OK,) * 4
    assert result.killed == ()
    assert len(traces.files) == 4  # one trace file per rank
    reports = result.reports
    assert reports[0].matched == STEPS and reports[0].mismatched == 0
    attaches = traces.events(3, Direction.ATTACH)
    extracts = traces.events(0, Direction.EXTRACT)
    # One attach per microbatch on the last stage, one extract per microbatch on stage 0.
    assert [e.seq for e in attaches] == list(range(STEPS))
    assert traces.events(3, Direction.EXTRACT) == [] and traces.events(0, Direction.ATTACH) == []
    assert traces.events(1) == [] and traces.events(2) == []
    _assert_pairs_agree(attaches, extracts)
    att, ext = attaches[0], extracts[0]
    # The engine's dict: next_token_ids first, then the logprob values, then the attached keys.
    assert att.keys_before == ("next_token_ids", "next_token_logprobs",
                               "extend_logprob_start_len_per_req")
    assert att.keys_after == att.keys_before + tuple(PREFIX + n for n in AUX)
    assert ext.keys_before[-1] == "__msg_type__"
    # Microbatches differ in size, as in the engine: slot m holds 4 + m % 3 requests.
    sizes = [result.options.batch_size(k % result.options.slots) for k in range(STEPS)]
    assert sizes[:3] == [4, 5, 6]
    assert [[t.shape for t in a.tensors] for a in attaches] == [
        [(b, 4), (b, 4), (b,)] for b in sizes
    ]
    assert [t.dtype for t in att.tensors] == ["float32", "int64", "float32"]
    rank = att.rank
    assert (rank.rank, rank.world_size, rank.pp_rank, rank.pp_size, rank.tp_rank,
            rank.tp_size) == (3, 4, 3, 4, 0, 1)
    assert ext.rank.pp_rank == 0 and ext.run_id == att.run_id != ""
    assert finding_kinds(out) == set()


def test_healthy_pipeline_with_tensor_parallel_slices(tmp_path: Path) -> None:
    result, traces = run_sample(str(tmp_path / "tp"), ranks=4, tp=2, steps=STEPS)
    assert result.exit_codes == (EXIT_OK,) * 4
    for tp_rank in range(2):
        attaches = traces.events(2 + tp_rank, Direction.ATTACH)
        extracts = traces.events(tp_rank, Direction.EXTRACT)
        assert len(attaches) == STEPS
        _assert_pairs_agree(attaches, extracts)
        assert attaches[0].rank.tp_rank == tp_rank and attaches[0].rank.tp_size == 2
        assert result.reports[tp_rank].matched == STEPS


@pytest.mark.parametrize("name", RAISING)
def test_raising_fault_stops_every_rank_with_the_engine_error(name: str, tmp_path: Path) -> None:
    fault = FAULTS[name]
    out = str(tmp_path / name)
    result, traces = run_sample(out, ranks=2, steps=STEPS, fault=name)
    failing = 1 if fault.raises_on == LAST else 0
    expected = [EXIT_PEER_LOST, EXIT_PEER_LOST]
    expected[failing] = EXIT_ENGINE_ERROR
    assert list(result.exit_codes) == expected
    assert result.killed == ()  # every rank ended on its own
    assert result.reports[failing].error == f"RuntimeError: {fault.error}"
    # The exact engine error is in the failing rank's trace, and only there.
    errors = traces.errors()
    assert list(errors) == [failing]
    (bad,) = errors[failing]
    assert bad.error_type == "RuntimeError"
    assert bad.error_message == fault.error
    assert bad.direction is (Direction.ATTACH if fault.raises_on == LAST else Direction.EXTRACT)
    assert bad.rank.pp_rank == failing
    stage0_config = name in ("no-observer", "old-observer")
    assert bad.seq == (0 if stage0_config else AT)
    # Every call before the failing one went through.
    assert all(e.ok for e in traces.events(failing) if e is not bad)
    assert fault.finding in finding_kinds(out)


def test_raising_faults_leave_the_dict_as_the_engine_does(tmp_path: Path) -> None:
    _, traces = run_sample(str(tmp_path / "bad-name"), ranks=2, steps=4, fault="bad-name")
    (bad,) = traces.errors()[1]
    assert bad.inserted_before_error == (PREFIX + "topk_logprobs",)
    _, traces = run_sample(str(tmp_path / "non-tensor"), ranks=2, steps=4, fault="non-tensor")
    (bad,) = traces.errors()[1]
    assert bad.inserted_before_error == (PREFIX + "topk_logprobs", PREFIX + "topk_ids")
    _, traces = run_sample(str(tmp_path / "skew"), ranks=2, steps=4, fault="observer-none")
    (bad,) = traces.errors()[0]
    assert bad.keys_after == bad.keys_before  # reconstruct failed: dict untouched
    assert bad.names == ("topk_values", "topk_indices", "entropy")


def test_raising_fault_on_four_stages_reaches_every_rank(tmp_path: Path) -> None:
    result, traces = run_sample(str(tmp_path / "dup4"), ranks=4, steps=STEPS, fault="duplicate")
    assert result.exit_codes == (EXIT_PEER_LOST, EXIT_PEER_LOST, EXIT_PEER_LOST,
                                 EXIT_ENGINE_ERROR)
    assert result.killed == ()
    (bad,) = traces.errors()[3]
    assert bad.error_message == FAULTS["duplicate"].error


def _fp(ev: Event, name: str) -> str | None:
    return next(t.fingerprint for t in ev.tensors if t.name == name)


def _check_silent(name: str, traces: TraceFiles, result: object, tp: int) -> None:
    """What each silent fault leaves in the traces (the engine itself said nothing)."""
    reports = result.reports  # type: ignore[attr-defined]
    last = _stage_ranks(1, tp)[0]
    attaches = traces.events(last, Direction.ATTACH)
    extracts = traces.events(0, Direction.EXTRACT)
    healthy_pairs = list(zip(attaches[:AT], extracts[:AT], strict=True))
    for att, ext in healthy_pairs:
        assert att.names == ext.names and _fp(att, "entropy") == _fp(ext, "entropy")
    changed = STEPS - AT
    if name == "tp-disagree":
        other = traces.events(last + 1, Direction.ATTACH)
        differs = [_fp(a, "entropy") != _fp(b, "entropy") for a, b in zip(attaches, other,
                                                                           strict=True)]
        assert differs == [False] * AT + [True] * changed
        # Stage 0 gets slice j from TP rank j where the element count divides by 2, and the
        # whole tensor from its own TP peer where it does not.
        opts = result.options  # type: ignore[attr-defined]
        sizes = [opts.batch_size(k % opts.slots) for k in range(AT, STEPS)]
        assert reports[0].mismatched == sum(b % 2 == 0 for b in sizes) > 0
        assert reports[1].mismatched == changed
    elif name == "overwrite-after-attach":
        for att, ext in zip(attaches[AT:], extracts[AT:], strict=True):
            assert att.tensors[2].shape == ext.tensors[2].shape
            assert _fp(att, "entropy") != _fp(ext, "entropy")
        assert reports[0].mismatched == changed
    elif name == "prefix-lookalike":
        for att, ext in zip(attaches[AT:], extracts[AT:], strict=True):
            assert att.names == tuple(AUX)
            assert ext.names == (*AUX, "sampler_seed")  # popped with the auxiliary output
        assert reports[0].mismatched == 0  # stage 0's own check cannot see it
        assert any("never arrived" in n for n in reports[1].notes)
    elif name == "reserved-name":
        assert [a.names for a in attaches[AT:]] == [(*AUX, "next_token_ids")] * changed
        assert reports[0].mismatched == 0
    elif name == "shape-in-transit":
        for att, ext in zip(attaches[AT:], extracts[AT:], strict=True):
            rows = att.tensors[0].shape[0]
            assert (att.tensors[0].shape, ext.tensors[0].shape) == ((rows, 4), (rows * 4,))
        assert reports[0].mismatched == changed
    elif name == "dtype-in-transit":
        for att, ext in zip(attaches[AT:], extracts[AT:], strict=True):
            assert (att.tensors[2].dtype, ext.tensors[2].dtype) == ("float32", "float16")
        assert reports[0].mismatched == changed
    elif name == "skipped-send":
        assert (len(attaches), len(extracts)) == (STEPS, STEPS - 1)
        assert (reports[0].skipped, reports[0].matched) == (1, STEPS - 1)
    else:  # pragma: no cover - a new silent fault needs its own expectations here
        raise AssertionError(f"no expectations for silent fault {name!r}")


@pytest.mark.parametrize("name", SILENT)
def test_silent_fault_runs_to_completion_and_shows_in_the_traces(
    name: str, tmp_path: Path
) -> None:
    tp = FAULTS[name].needs_tp
    ranks = 2 * tp
    out = str(tmp_path / name)
    result, traces = run_sample(out, ranks=ranks, steps=STEPS, fault=name)
    assert result.options.tp == tp  # tp-disagree picks two TP ranks by itself
    assert result.exit_codes == (EXIT_OK,) * ranks
    assert traces.errors() == {}
    _check_silent(name, traces, result, tp)
    assert FAULTS[name].finding in finding_kinds(out)  # what only a cross-rank check finds


def test_every_fault_is_tested() -> None:
    assert set(RAISING) | set(SILENT) == set(FAULTS)
    assert {FAULTS[n].raises_on for n in RAISING} == {FIRST, LAST}


@pytest.mark.parametrize("transport", ["pptrace", "sglang"])
def test_each_transport_runs_the_pipeline(transport: str, tmp_path: Path) -> None:
    if transport == "sglang" and importlib.util.find_spec("sglang") is None:
        pytest.skip("SGLang's wheel is not installed")
    result, traces = run_sample(str(tmp_path / transport), ranks=2, steps=3, fault="duplicate",
                                transport=transport)
    module = {"pptrace": "pptrace.record.engine",
              "sglang": "sglang.srt.sampling.sampling_observer_pp"}
    assert {r.transport for r in result.reports.values()} == {module[transport]}
    assert result.exit_codes == (EXIT_PEER_LOST, EXIT_ENGINE_ERROR)
    (bad,) = traces.errors()[1]
    assert bad.error_message == FAULTS["duplicate"].error


def test_launcher_stops_a_run_that_does_not_end(tmp_path: Path) -> None:
    run_sample(str(tmp_path / "warm"), ranks=2, steps=1)  # start the fork server first
    opts = PipelineOptions(ranks=2, steps=10**7, out_dir=str(tmp_path / "endless"))
    result = run_pipeline(opts, timeout=3.0)
    assert result.killed == (0, 1)
    assert all(code != EXIT_OK for code in result.exit_codes)
    # SIGTERM reaches Python in at least one rank, which reports and flushes on its way out.
    terminated = [r for r in result.reports.values() if r.exit_code == EXIT_TERMINATED]
    assert terminated
    assert all(r.recorded > 0 for r in terminated if r.pp_rank in (0, 1))


def test_analyzer_sees_one_orphan_for_one_skipped_send(tmp_path: Path) -> None:
    out = str(tmp_path / "skip")
    result, _ = run_sample(out, ranks=2, steps=STEPS, fault="skipped-send")
    assert result.exit_codes == (EXIT_OK, EXIT_OK)
    assert finding_kinds(out) == {"orphan-attach"}


def test_the_tp_broadcast_layout_runs_and_delivers_every_output(tmp_path: Path) -> None:
    """The VPP path's layout: the last stage's TP rank 0 alone attaches, a broadcast hands its
    dict to TP rank 1, and both send their copy to stage 0, whose two TP ranks extract."""
    result, traces = run_sample(str(tmp_path / "bc"), ranks=4, tp=2, steps=4, tp_broadcast=True)
    assert result.exit_codes == (0, 0, 0, 0)
    reports = result.reports
    assert [reports[r].matched for r in (0, 1)] == [4, 4]  # both stage-0 TP ranks: intact
    directions = {r: {e.direction for e in traces.events(r)} for r in range(4)}
    assert directions == {0: {Direction.EXTRACT}, 1: {Direction.EXTRACT},
                          2: {Direction.ATTACH}, 3: set()}
    assert finding_kinds(str(tmp_path / "bc")) == set()  # no false missing-rank for tp 1
