"""Rotated traces from real runs (issue 17, item 4): ``pptrace demo`` with a tiny disk budget,
its ranks rotating at different points, analyzes with no finding but the window-cut infos on a
healthy run, and still finds an injected ``dtype-in-transit`` inside the kept window.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analysis, analyze
from pptrace.analyze.message_sides import cut_at_start
from pptrace.load.loader import load_paths
from pptrace.model.findings import Finding, FindingKind, MessageId, Severity
from pptrace.model.messages import MessageOp

pytestmark = pytest.mark.slow

K = FindingKind
# 20 KB segments, 100 KB a process: a few hundred steps rotate many segments away.
BUDGET = ("--rotate-mb", "0.02", "--max-mb", "0.1")


def _demo(out: Path, *args: str, status: int = 0) -> str:
    """Run the demo (its status: 1 when an output changed on the way); what it printed."""
    done = subprocess.run([sys.executable, "-m", "pptrace.cli.main", "demo", "--no-view",
                           "--no-analyze", "--out", str(out), *BUDGET, *args],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == status, done.stdout + done.stderr
    return done.stdout


def _rotated(out: Path) -> dict[int, int]:
    """Each traced rank's events rotated away (its stats say)."""
    trace = load_paths([str(out)])
    return {p.rank.rank: p.stats.rotated for p in trace.processes
            if p.rank.rank is not None and p.stats is not None and p.events}


def _judged(findings: list[Finding]) -> list[Finding]:
    """The findings but the message layer's cut infos: a rank whose kept segments hold no
    message (rotation is by bytes, so that happens) leaves its channels unpaired, said as an
    info naming why; nothing else may come of the cut."""
    cuts = [f for f in findings if f.kind is K.MSG_CUT]
    assert all(f.severity is Severity.INFO and "kept no message" in f.message for f in cuts), [
        f.message for f in cuts]
    return [f for f in findings if f.kind is not K.MSG_CUT]


def test_a_healthy_rotated_run_gives_only_window_cuts(tmp_path: Path) -> None:
    out = tmp_path / "healthy"
    printed = _demo(out, "--ranks", "4", "--steps", "400")
    rotated = _rotated(out)
    assert set(rotated) == {0, 3} and all(n > 0 for n in rotated.values())
    # The table names each rank's trace as it is on disk: its segments and how many it kept,
    # or the one segment it kept (a flush larger than a segment gets one of its own, and the
    # budget may then keep that one alone).
    # (The names stand on the line under the table, one entry per rank, two spaces apart.)
    (listed,) = [ln for ln in printed.splitlines() if ln.startswith("trace files: ")]
    entries = {int(m[1]): m[0] for m in re.finditer(
        r"pptrace-rank(\d)-pid\d+\S*(?: \(\d+ segments\))?", listed)}
    assert set(entries) == {0, 1, 2, 3}, listed
    for rank in (0, 3):
        entry = entries[rank]
        named = re.search(r"(pptrace-rank\d-pid\d+)\.\*(\.otlp\.jsonl) \((\d+) segments\)", entry)
        if named:
            kept = list(out.glob(f"{named[1]}.[0-9]*{named[2]}"))
            assert len(kept) == int(named[3]) > 1, (entry, kept)
        else:
            one = re.search(r"pptrace-rank\d-pid\d+\.\d{6}\.otlp\.jsonl", entry)
            assert one and (out / one[0]).is_file(), printed
            assert len(list(out.glob(one[0].split(".")[0] + ".*"))) == 1, printed
    findings = _judged(analyze(load_paths([str(out)])))
    assert [(f.kind, f.severity, f.channel) for f in findings] == [
        (K.WINDOW_CUT, Severity.INFO, "pp0<-pp3/tp0")]
    assert "are outside the kept window of rank" in findings[0].message


def test_a_dtype_change_inside_the_kept_window_is_found(tmp_path: Path) -> None:
    out = tmp_path / "dtype"
    _demo(out, "--ranks", "2", "--steps", "400", "--fault", "dtype-in-transit", status=1)
    findings = _judged(analyze(load_paths([str(out)])))
    assert sorted(f.kind.value for f in findings) == ["dtype-mismatch", "window-cut"]
    cut = next(f for f in findings if f.kind is K.WINDOW_CUT)
    dtype = next(f for f in findings if f.kind is K.DTYPE_MISMATCH)
    start = int(cut.message.split("judged from microbatch ")[1].split(" ")[0])
    assert dtype.microbatch == start and dtype.cascade == 399 - start


def test_a_rotated_tp_broadcast_run(tmp_path: Path) -> None:
    """The last stage's TP rank 0 (rank 2) broadcasts each output dict to TP rank 1; its
    broadcasts are numbered apart from its point-to-point messages, so once its oldest records
    are rotated away its cut channels are still paired by seq, and so are its broadcasts."""
    out = tmp_path / "broadcast"
    _demo(out, "--ranks", "4", "--tp", "2", "--tp-broadcast", "--steps", "300")
    trace = load_paths([str(out)])
    judged = analysis(trace)
    findings = _judged(list(judged.findings))
    assert sorted((f.kind.value, f.channel) for f in findings) == [
        ("window-cut", "pp0/tp1<-pp1/tp0"), ("window-cut", "pp0<-pp1/tp0")]
    by_rank = {p.rank.rank: i for i, p in enumerate(trace.processes)}
    source = trace.processes[by_rank[2]]
    assert cut_at_start(source) and any(m.broadcast for m in source.messages)
    # Every send whose receive both ends kept is paired with that receive, on each channel of
    # the broadcasting rank (send #n is receive #n: one peer each way).
    for src, dst in ((2, 0), (0, 2)):
        s, r = by_rank[src], by_rank[dst]
        got = {e.seq: e for e in trace.processes[r].messages
               if e.op is MessageOp.RECV and e.phase == "end" and not e.broadcast}
        sent = [m for m in trace.processes[s].messages
                if m.op is MessageOp.SEND and not m.broadcast and m.seq in got]
        assert sent, (src, dst)
        assert all(judged.message_pairs.get(MessageId.of(s, m)) == MessageId.of(r, got[m.seq])
                   for m in sent), (src, dst)
    # Each broadcast whose receive rank 3 kept is paired with it.
    member = by_rank[3]
    got = {e.seq: e for e in trace.processes[member].messages
           if e.op is MessageOp.RECV and e.phase == "end" and e.broadcast}
    sent = [m for m in source.messages if m.broadcast and m.seq in got]
    assert sent
    assert all(judged.broadcast_pairs.get(MessageId.of(by_rank[2], m))
               == (MessageId.of(member, got[m.seq]),) for m in sent)
