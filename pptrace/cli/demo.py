"""``pptrace demo``: run the sample PP sampling pipeline on CPU, traced, then analyze the traces.

The sample (``samples/``) starts one process per rank on ``torch.distributed``'s gloo backend,
runs a small decoder model split across the pipeline stages, attaches the last stage's auxiliary
output to the output dict through pptrace's instrumented transport and extracts it on stage 0,
the way the engine does. ``--fault NAME`` injects one of the engine's failure modes.

Exit status: 0 when every rank exited 0, stage 0 received every output intact and the analysis
found no error; 1 otherwise; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import textwrap
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from pptrace.cli.progress import Status, text_width
from pptrace.cli.tracing import add_export_arguments, export_env
from pptrace.model.errors import ConfigError

if TYPE_CHECKING:
    from pptrace_samples.launch import RunResult

__all__ = ["add_parser", "run"]

EPILOG = """\
exit status: 0 healthy run (every rank exited 0, every output arrived intact, no error found),
1 otherwise (a rank failed, an output changed on the way, or the analysis found an error),
2 bad arguments.

examples:
  pptrace demo                              # 4 ranks, 32 steps, no fault
  pptrace demo --list-faults                # what can go wrong
  pptrace demo --fault duplicate --ranks 2  # the engine raises: last stage
  pptrace demo --fault tp-disagree          # silent: 2 stages x 2 TP ranks
  pptrace demo --tp 2 --steps 64 --out traces/tp2
  pptrace demo --endpoint http://localhost:4318   # files + spans to Jaeger

The ranks honour the same PPTRACE_* and OTEL_* variables as 'pptrace run' (see its --help),
except PPTRACE_DIR (the demo writes to --out).
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Create the ``demo`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="run a traced multi-process PP sampling pipeline on CPU (optionally with a fault)",
        description=(
            "Run the sample pipeline-parallel sampling pipeline on CPU (torch.distributed,\n"
            "gloo): one process per rank; the last stage attaches its sampling observer's\n"
            "auxiliary output to the output dict, the dict travels around the PP ring to\n"
            "stage 0, which extracts it. Every rank writes a pptrace trace file; the traces\n"
            "are then analyzed."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--fault", metavar="NAME", default=None,
                        help="inject a fault (see --list-faults)")
    parser.add_argument("--list-faults", action="store_true",
                        help="list the faults, where they bite and what the engine does; exit")
    parser.add_argument("--ranks", type=int, default=4, metavar="N",
                        help="processes in all, pipeline stages x TP ranks (default 4)")
    parser.add_argument("--tp", type=int, default=1, metavar="N",
                        help="tensor-parallel ranks per stage (default 1; tp-disagree uses 2)")
    parser.add_argument("--steps", type=int, default=32, metavar="N",
                        help="microbatch decode steps through the pipeline (default 32)")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="directory for the per-rank trace files "
                             "(default ./pptrace-traces/demo-<time>; must not hold traces)")
    parser.add_argument("--tp-broadcast", action="store_true",
                        help="the VPP path's layout: only the last stage's TP rank 0 attaches, "
                             "and a broadcast hands its dict to the other TP ranks (needs --tp 2)")
    parser.add_argument("--seed", type=int, default=0, help="model and sampling seed")
    parser.add_argument("--no-fingerprint", action="store_true",
                        help="do not hash auxiliary tensors (then changed bytes go unseen)")
    parser.add_argument("--no-analyze", action="store_true",
                        help="only run the pipeline and write the traces")
    parser.add_argument("--no-view", action="store_true",
                        help="do not open the viewer afterwards (it opens only when stdin and "
                             "stdout are a terminal)")
    parser.add_argument("--timeout", type=float, default=180.0, metavar="S",
                        help="stop every rank after this many seconds (default 180)")
    add_export_arguments(parser, fingerprint=False)
    parser.set_defaults(func=run)
    return parser


def list_faults(out: IO[str]) -> None:
    """One line per fault: name, where, what the engine does."""
    from pptrace_samples.faults import ALL_FAULTS

    width = max(len(name) for name in ALL_FAULTS)
    for fault in ALL_FAULTS.values():
        out.write(f"{fault.name:<{width}}  {fault.where}: {fault.engine}\n")


def default_out_dir(now: datetime.datetime | None = None) -> str:
    """``pptrace-traces/demo-<time>``, made unique if it already exists."""
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = os.path.join("pptrace-traces", f"demo-{stamp}")
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}"
    return path


def _check_out_dir(path: str) -> None:
    if os.path.isdir(path) and any(n.endswith((".json", ".jsonl")) for n in os.listdir(path)):
        raise ConfigError(f"--out {path}: already holds trace files; choose an empty directory")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"--out {path}: not a directory")


def _steps(done: dict[int, int], steps: int) -> str:
    """The progress figures of a demo run: steps done per rank."""
    return "steps " + "  ".join(f"r{r} {n}/{steps}" for r, n in sorted(done.items()))


def fill(text: str, indent: str = "  ", stream: IO[str] | None = None) -> str:
    """One paragraph in the terminal's width, broken between words (never inside a name or a
    path); off a terminal (a log, a pipe) one line, as the report does."""
    width = text_width(stream or sys.stdout)
    if width is None:
        return text
    return textwrap.fill(text, width, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=False)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


@dataclass(frozen=True, slots=True)
class Stage0Check:
    """What stage 0 made of the outputs the last stage attached (summed over TP ranks)."""

    attached: int  # outputs the last stage sent on with an auxiliary output attached
    matched: int  # arrived identical to what the last stage computed
    mismatched: int  # arrived, but differed
    skipped: int  # the last stage skipped the send (a skip marker arrived instead)

    @property
    def unchecked(self) -> int:
        """Attached but never checked on stage 0 (it stopped first, or the output was lost)."""
        return max(0, self.attached - self.matched - self.mismatched - self.skipped)

    @property
    def complete(self) -> bool:
        """Every attached output reached stage 0 intact."""
        return self.matched == self.attached

    def sentence(self) -> str:
        """One line; every count counts what its words name."""
        parts = [f"{self.matched} arrived identical to what the last stage computed",
                 f"{self.mismatched} differed", f"{self.skipped} never sent (skipped)"]
        if self.unchecked:
            parts.append(f"{self.unchecked} never checked on stage 0")
        return (f"{_count(self.attached, 'output', 'outputs')} left the last stage with an "
                "auxiliary output attached: " + ", ".join(parts))


def _summary(result: RunResult, out: IO[str]) -> bool:
    """Print the per-rank table and stage 0's check; True when the run was healthy."""
    from pptrace_samples.options import EXIT_PEER_LOST

    opts = result.options
    # 80 columns: the trace files go on their own lines below the table. "events" are the
    # attach/extract calls pptrace recorded (a middle stage makes none: it only forwards),
    # "messages" the PP messages it recorded (every stage sends and receives).
    out.write(f"\n{'rank':>4} {'stage':>5} {'tp':>3} {'exit':>4}  {'outcome':<24}"
              f"{'steps':>6} {'events':>7} {'messages':>9}\n")
    files: list[str] = []
    for rank, code in enumerate(result.exit_codes):
        rep = result.reports.get(rank)
        pp_rank, tp_rank = divmod(rank, opts.tp)
        if rep is None:
            outcome = "killed by the launcher" if rank in result.killed else "no report"
            out.write(f"{rank:>4} {pp_rank:>5} {tp_rank:>3} {code:>4}  {outcome:<24}"
                      f"{'-':>6} {'-':>7} {'-':>9}\n")
            continue
        out.write(f"{rank:>4} {pp_rank:>5} {tp_rank:>3} {code:>4}  {rep.outcome:<24}"
                  f"{rep.steps:>6} {rep.recorded:>7} {rep.messages:>9}\n")
        files.append(os.path.basename(rep.trace_file))
    if files:
        out.write(fill("trace files: " + "  ".join(files), stream=out) + "\n")
    for rank, rep in sorted(result.reports.items()):
        if rep.error and rep.exit_code != EXIT_PEER_LOST:
            out.write(f"rank {rank}: {rep.error}\n")
        for note in rep.notes:
            out.write(f"rank {rank}: {note}\n")
    stage0 = [rep for rep in result.reports.values() if rep.pp_rank == 0]
    last = [rep for rep in result.reports.values() if rep.pp_rank == opts.pp - 1]
    check = Stage0Check(attached=sum(r.attached for r in last),
                        matched=sum(r.matched for r in stage0),
                        mismatched=sum(r.mismatched for r in stage0),
                        skipped=sum(r.skipped for r in stage0))
    out.write(fill(f"stage 0 check: {check.sentence()}", stream=out) + "\n")
    for rep in stage0:
        if rep.first_mismatch:
            # Per rank: with TP each stage-0 rank gets its own copy, and the report counts per
            # channel (one stage-0 rank each), so these are the figures it can be held to.
            checked = rep.matched + rep.mismatched
            out.write(fill(f"  rank {rep.rank}: {rep.mismatched} of {checked} differed, "
                           f"first difference at {rep.first_mismatch}", "    ", out) + "\n")
    transports = {r.transport for r in result.reports.values()}
    if transports:
        out.write(f"transport: {', '.join(sorted(transports))}\n")
    out.write(f"traces: {opts.out_dir}  ({result.elapsed:.1f}s)\n")
    return bool(result.ok) and check.complete and len(result.reports) == opts.ranks


def _analyze_and_report(out_dir: str, view: bool = False) -> int:
    """Analyze the run's traces, print the report and, when asked, open the viewer on them;
    return the analysis exit status."""
    from pptrace.analyze.analyzer import analysis
    from pptrace.cli.inputs import load_trace
    from pptrace.model.findings import Severity
    from pptrace.report.text import exit_status, render_text

    status = Status(sys.stderr)
    trace = load_trace([out_dir], status)
    status.stage(f"pptrace: analyzing {trace.event_count:,} events")
    judged = analysis(trace)  # the viewer pairs on its channels, as the report does
    trace, findings = judged.trace, list(judged.findings)  # its times aligned (judged.clocks)
    status.end()
    sys.stdout.write("\n" + render_text(trace, findings, Severity.ERROR, clocks=judged.clocks,
                                          width=text_width(sys.stdout)))
    if view:
        from pptrace.cli.view import view as open_view

        sys.stdout.flush()
        open_view(trace, judged, [out_dir])
    return exit_status(findings, Severity.ERROR)


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _viewer_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("textual") is not None


def why_no_viewer(args: argparse.Namespace, interactive: bool, installed: bool) -> str | None:
    """Why the viewer stays closed after the run (None when it opens)."""
    if args.no_analyze:
        return "--no-analyze"
    if args.no_view:
        return "--no-view"
    if not interactive:
        return "stdin or stdout is not a terminal"
    if not installed:
        return "the viewer is not installed: pip install 'pptrace[view]'"
    return None


def next_steps(out_dir: str, analyzed: bool, no_viewer: str | None) -> list[str]:
    """The closing lines: the commands this run did not run, and why the viewer did not open."""
    lines = [] if analyzed else [f"next: pptrace analyze {out_dir}"]
    if no_viewer is not None:
        lines.append(f"next: pptrace view {out_dir}   (the viewer did not open: {no_viewer})")
    return lines


def run(args: argparse.Namespace) -> int:
    """Run the demo; return the exit status."""
    if args.list_faults:
        list_faults(sys.stdout)
        return 0
    from pptrace_samples.launch import run_pipeline
    from pptrace_samples.options import PipelineOptions

    out_dir = args.out or default_out_dir()
    _check_out_dir(out_dir)
    # Each rank sees what the options say, as an engine's ranks under 'pptrace run' would
    # (export, endpoint, protocol, service name), on top of the variables it inherits.
    env = export_env(args, os.environ)
    tracing_env = tuple(sorted((k, v) for k, v in env.items()
                               if k.startswith(("PPTRACE_", "OTEL_"))))
    opts = PipelineOptions(
        ranks=args.ranks, tp=args.tp, steps=args.steps, fault=args.fault, out_dir=out_dir,
        seed=args.seed, fingerprint=not args.no_fingerprint, env=tracing_env,
        tp_broadcast=args.tp_broadcast,
    ).resolved()
    print(fill(f"pptrace demo: {opts.ranks} ranks = {opts.pp} PP stages x {opts.tp} TP, "
               f"{opts.steps} decode steps over {opts.slots} microbatch slots, "
               f"fault: {opts.fault or 'none'}"))
    if opts.fault:
        from pptrace_samples.faults import ALL_FAULTS

        fault = ALL_FAULTS[opts.fault]
        print(fill(f"  {fault.what} ({fault.where}); the engine: {fault.engine}", "    "))
    print(f"traces: {out_dir}{_exporters_line(env)}", flush=True)
    progress = Status(sys.stderr, quiet_below=0.0)  # off a terminal: the final steps, once
    progress.stage(_steps({r: 0 for r in range(opts.ranks)}, opts.steps))
    result = run_pipeline(opts, on_progress=lambda done: progress.update(_steps(done, opts.steps)),
                          timeout=args.timeout)
    progress.end(_steps({r: (rep.steps if (rep := result.reports.get(r)) else 0)
                         for r in range(opts.ranks)}, opts.steps), keep=True)
    healthy = _summary(result, sys.stdout)
    shipped = otlp_shipped(out_dir)
    if shipped:
        print(shipped)
    status = 0 if healthy else 1
    no_viewer = why_no_viewer(args, _interactive(), _viewer_installed())
    if not args.no_analyze:
        analysis = _analyze_and_report(out_dir, view=no_viewer is None)
        if analysis:
            status = 1
    print()
    for line in next_steps(out_dir, not args.no_analyze, no_viewer):
        print(line)
    return status


def otlp_shipped(out_dir: str, timeout: float = 30.0) -> str:
    """What the directory's OTLP shipper delivered, once it is done (empty when none ran)."""
    from pptrace.export.ship_launch import LOCK_NAME, STATE_NAME, wait_for_shipper
    from pptrace.ship.state import ShipState

    if not os.path.exists(os.path.join(out_dir, LOCK_NAME)):  # made before a shipper starts
        return ""
    done = wait_for_shipper(out_dir, timeout)
    path = os.path.join(out_dir, STATE_NAME)
    if not os.path.exists(path):
        return ""
    t = ShipState.load(path).totals()
    line = (f"OTLP: {t['events_sent']} events and {t['messages_sent']} messages delivered, "
            f"{t['events_lost']} events and {t['messages_lost']} messages lost")
    return line + ("" if done else f" so far (the shipper is still at work after {timeout:g}s)")


def _exporters_line(env: dict[str, str]) -> str:
    """Where the spans go besides the files, when OTLP export is on."""
    from pptrace.model.config import Config

    if "otlp" not in Config.from_env(env).exporters:
        return ""
    endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "the default OTLP endpoint")
    service = env.get("OTEL_SERVICE_NAME") or "pptrace"
    return f"  (and OTLP to {endpoint}, service {service})"
