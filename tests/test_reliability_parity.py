"""Recording never changes what the engine sees, in every mode and with every sink.

A compact differential check (the exhaustive one is the parity suite): each scenario runs once
through the bare engine function and once through the pptrace wrapper, on freshly built but
identical inputs, and the two outcomes must be indistinguishable (same result object, same
exception type and message, same dict keys holding the same objects).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pptrace.model.config import Config
from pptrace.record.wrapper import wrap_transport
from tests.helpers_reliability import (
    ListSink,
    file_sink_factory,
    make_recorder,
    read_trace_file,
    run_call,
    same_outcome,
    scenarios,
    trace_files,
    transport,
)

MODES = [
    pytest.param(mode, fp, sink, id=f"{mode}-fp{int(fp)}-{sink}")
    for mode, fp, sink in itertools.product(("stream", "flight"), (False, True), ("list", "file"))
]


@pytest.mark.parametrize(("mode", "fingerprint", "sink"), MODES)
def test_wrapped_calls_are_indistinguishable_from_bare(
    mode: str, fingerprint: bool, sink: str, tmp_path: object
) -> None:
    mod = transport()
    config = Config(mode=mode, fingerprint=fingerprint, trace_dir=str(tmp_path),
                    flush_interval=0.05)
    listed = ListSink()
    rec = (make_recorder(config, listed) if sink == "list"
           else make_recorder(config, sink_factory=file_sink_factory(config)))
    rec.start()
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    bare = {"attach": mod.add_auxiliary_output_to_pp_tensors,
            "extract": mod.pop_auxiliary_output_from_pp_tensors}
    wrapped = {"attach": attach, "extract": extract}
    cases = scenarios()
    for case in cases:
        want = run_call(bare[case.direction], *case.build())
        got = run_call(wrapped[case.direction], *case.build())
        same_outcome(want, got)
        if got.error_obj is not None:
            # The wrapper re-raises the engine's own exception: its traceback ends in the engine.
            tb = got.error_obj.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            assert tb is not None and "pptrace" not in tb.tb_frame.f_code.co_filename
    rec.request_dump()
    rec.shutdown(timeout=5.0)
    assert rec.recorded == len(cases)
    assert rec.internal_errors == 0, rec.warn.counts
    if sink == "list":
        # Stream mode exports every call; flight mode dumps its ring (big enough for all).
        assert len(listed.events) == len(cases)
        assert [e.seq for e in listed.events if e.direction.value == "attach"] == list(
            range(sum(c.direction == "attach" for c in cases)))
    else:
        (path,) = trace_files(str(tmp_path))
        events, stats, bad = read_trace_file(path)
        assert len(events) == len(cases) and not bad
        assert stats[-1].recorded == len(cases) and stats[-1].dropped == 0


def test_disabled_recorder_is_a_pass_through() -> None:
    mod = transport()
    rec = make_recorder(Config(enabled=False), ListSink())
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    for case in scenarios():
        fn = attach if case.direction == "attach" else extract
        bare = (mod.add_auxiliary_output_to_pp_tensors if case.direction == "attach"
                else mod.pop_auxiliary_output_from_pp_tensors)
        same_outcome(run_call(bare, *case.build()), run_call(fn, *case.build()))
    assert rec.recorded == 0


ODD_NAMES = ["\ud800", "\x00", "é", "\u2028", "x" * 10_000, " ", "\\", '"', "\x1b[2J", "{0}",
             "__sampling_observer_output__.", "日本"]


def test_odd_names_are_recorded_exactly(tmp_path: object) -> None:
    # Any str is a legal tensor name to the engine: none may cost an event or come back altered.
    from pptrace.load.loader import load_paths
    from tests.doubles import Observer, Output
    from tests.helpers_reliability import SENTINEL, T1

    mod = transport()
    config = Config(trace_dir=str(tmp_path), flush_interval=60)
    rec = make_recorder(config, sink_factory=file_sink_factory(config))
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    d: dict[str, object] = {}
    attach(d, Output({n: T1 for n in ODD_NAMES}))
    assert extract(d, Observer(SENTINEL)) is SENTINEL
    rec.shutdown(timeout=5.0)
    assert rec.dropped == 0 and rec.internal_errors == 0 and rec.export_errors == 0
    trace = load_paths([str(tmp_path)])
    assert not trace.problems
    (proc,) = trace.processes
    assert [e.names for e in proc.events] == [tuple(ODD_NAMES)] * 2


@pytest.mark.slow
@pytest.mark.parametrize("fingerprint", [False, True], ids=["fp0", "fp1"])
def test_sample_pipeline_tokens_equal_an_untraced_recomputation(tmp_path: object,
                                                                fingerprint: bool) -> None:
    # The sample launcher does not hand out the sampled tokens, nor run untraced; what it does
    # offer: stage 0 compares every token the traced ring delivered, with torch.equal, against
    # the same forward recomputed locally with no transport and no pptrace in the way.
    from pptrace_samples.launch import run_pipeline
    from pptrace_samples.options import PipelineOptions

    steps = 6
    result = run_pipeline(PipelineOptions(ranks=2, steps=steps, fingerprint=fingerprint,
                                          out_dir=str(tmp_path), comm_timeout=20.0))
    assert result.ok, result.reports
    stage0 = result.reports[0]
    assert (stage0.matched, stage0.mismatched) == (steps, 0), stage0.first_mismatch
    assert stage0.recorded > 0 and stage0.dropped == 0


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("fingerprint", [False, True])
def test_sample_tokens_are_bit_identical_with_tracing_on_and_off(
    tmp_path: Path, fingerprint: bool
) -> None:
    from pptrace_samples.launch import run_pipeline
    from pptrace_samples.options import PipelineOptions

    runs = {}
    for trace in (False, True):
        out = tmp_path / f"trace-{trace}"
        opts = PipelineOptions(ranks=2, steps=6, out_dir=str(out), trace=trace,
                               fingerprint=fingerprint)
        result = run_pipeline(opts, timeout=120)
        assert result.ok, result.exit_codes
        runs[trace] = {rank: report.tokens for rank, report in result.reports.items()}
        traced_files = [p for p in out.iterdir() if p.suffix == ".jsonl"] if out.exists() else []
        assert len(traced_files) == (2 if trace else 0)
    assert set(runs[True]) == {0, 1}
    assert all(len(digest) == 32 for digest in runs[True].values())
    # Stage 0 received exactly what the last stage sampled, and tracing changed no token.
    assert runs[True][0] == runs[True][1]
    assert runs[True] == runs[False]
    # The digest does see the tokens: another seed samples others.
    other = run_pipeline(PipelineOptions(ranks=2, steps=6, out_dir=str(tmp_path / "seed"),
                                         seed=7, trace=False), timeout=120)
    assert other.ok and other.reports[0].tokens != runs[False][0]
