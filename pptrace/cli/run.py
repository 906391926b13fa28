"""``pptrace run [options] -- COMMAND...``: run the engine's usual command with pptrace active.

In the manner of ``opentelemetry-instrument``: the options become ``PPTRACE_*`` / ``OTEL_*``
variables, pptrace's bootstrap folder goes first on ``PYTHONPATH`` (its ``sitecustomize`` chains
to any other), and the command replaces this process. Every Python process of the command's tree,
including ranks started with ``spawn``, activates pptrace before the engine's code runs.

    pptrace run --export file,otlp -- python -m sglang.launch_server --pp-size 4 ...
    pptrace run --target mytransport:send_aux,recv_aux -- torchrun --nproc-per-node 2 pp.py

``--target MODULE[:ATTACH,EXTRACT][@PREFIX]`` (repeatable; ``PPTRACE_TARGETS``) names the transport
modules to trace instead of SGLang's (``pptrace.model.target``); a malformed one is refused
before COMMAND starts (exit 2). The run says one closing line (``pptrace.activation.run_notes``):
where the traces went and what to run next, or why nothing was traced. For that, ``pptrace run``
also sets ``PPTRACE_RUN_PID`` (the command's process: ``exec`` keeps the pid) and
``PPTRACE_RUN_STATE`` (a private folder of marker files, removed when the command's process
exits), for its own bookkeeping.

Where a C++ compiler is present and this torch and Python have no build of pptrace's native
reader (the fast path), the launcher starts one in a detached background process, said in one
line: the processes already running take it up when it lands (within about a second), those
started after it use it from the start; ``--native-build wait`` builds it before
COMMAND starts instead, ``--native-build off`` or ``PPTRACE_NATIVE=0`` never builds
(``pptrace.activation.autobuild``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence

from pptrace.activation import autobuild
from pptrace.cli import launchers
from pptrace.cli.tracing import add_export_arguments, export_env
from pptrace.model.config import ENV_DOC
from pptrace.model.errors import ConfigError
from pptrace.model.target import DEFAULT_MODULE, as_targets, format_targets

__all__ = ["OTEL_DOC", "add_parser", "bootstrap_dir", "build_env", "main", "run"]

#: The ``OTEL_*`` variables pptrace honours (the OTLP ones are read by the official exporters).
OTEL_DOC: dict[str, str] = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": "collector base URL (grpc: http://localhost:4317, "
    "http/protobuf: http://localhost:4318, /v1/traces appended)",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "full traces URL (overrides the base URL)",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc or http/protobuf (default http/protobuf)",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "overrides OTEL_EXPORTER_OTLP_PROTOCOL for traces",
    "OTEL_EXPORTER_OTLP_HEADERS": "key=value,... sent with each export (or ..._TRACES_HEADERS)",
    "OTEL_EXPORTER_OTLP_TIMEOUT": "seconds per export request (default: min(1, exit timeout))",
    "OTEL_SERVICE_NAME": "service name of pptrace's spans (default pptrace)",
    "OTEL_RESOURCE_ATTRIBUTES": "extra resource attributes, key=value,...",
    "OTEL_TRACES_EXPORTER": "without PPTRACE_EXPORT: otlp adds OTLP export to the trace files "
    "(none: files only; other exporter names are for other tools and ignored)",
    "OTEL_SDK_DISABLED": "true: OpenTelemetry is off, and so is pptrace (said once)",
}

# option -> variable it sets (the export options' are in pptrace.cli.tracing)
_OPTION_ENV = (
    ("dir", "PPTRACE_DIR"),
    ("mode", "PPTRACE_MODE"),
    ("flight_size", "PPTRACE_FLIGHT_SIZE"),
    ("exit_timeout", "PPTRACE_EXIT_TIMEOUT"),
    ("run_id", "PPTRACE_RUN_ID"),
    ("pp_size", "PPTRACE_PP_SIZE"),
    ("tp_size", "PPTRACE_TP_SIZE"),
)


def bootstrap_dir() -> str:
    """The folder holding pptrace's ``sitecustomize.py``."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(package, "activation", "_bootstrap")


def _epilog() -> str:
    width = max(map(len, [*ENV_DOC, *OTEL_DOC])) + 2
    lines = ["environment (PPTRACE_*; options above set the same variables):"]
    lines += [f"  {name:<{width}}{doc}" for name, doc in ENV_DOC.items()]
    lines += ["", "OpenTelemetry variables honoured:"]
    lines += [f"  {name:<{width}}{doc}" for name, doc in OTEL_DOC.items()]
    lines += [
        "",
        "examples:",
        "  pptrace run -- python -m sglang.launch_server --model-path M --pp-size 2",
        "  pptrace run --endpoint http://jaeger:4317 --protocol grpc -- python -m ...",
        "  pptrace run --target mytransport:send_aux,recv_aux -- torchrun ... pp.py",
        "  pptrace run --target pptrace.record.engine -- python pp.py  # the reference",
        "  eval \"$(pptrace run --print-env)\"  # the same, for a command you cannot change",
    ]
    return "\n".join(lines)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> (
        argparse.ArgumentParser):
    """Create the ``run`` subcommand."""
    p = subparsers.add_parser(
        "run",
        help="run a command with pptrace active in every Python process it starts",
        description=(
            "Run COMMAND (the engine's usual command line) with pptrace active in every Python "
            "process of its tree, rank processes started with 'spawn' included: attach and "
            "extract are recorded as spans, written to per-rank trace files and/or sent over "
            "OTLP. Put '--' before COMMAND."
        ),
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dir", metavar="DIR", help="directory for per-rank trace files")
    p.add_argument("--target", dest="targets", action="append",
                   metavar="MODULE[:ATTACH,EXTRACT][@PREFIX]",
                   help="trace this transport module instead of SGLang's (repeatable): a module "
                        "that vendors, forks or renames attach and extract, with the names of "
                        "its two functions when they differ from SGLang's, and @PREFIX, the key "
                        "prefix its attach inserts under (without it each process learns it "
                        "from the keys attach inserted or extract removed; SGLang's own module "
                        "keeps SGLang's) (sets PPTRACE_TARGETS)")
    p.add_argument("--mode", choices=("stream", "flight"), help="stream every event, or keep "
                   "a flight-recorder ring dumped on error, SIGUSR1 and exit")
    p.add_argument("--flight-size", type=int, metavar="N", help="events kept in flight mode")
    p.add_argument("--exit-timeout", type=float, metavar="SECONDS",
                   help="time allowed to flush at exit (default 2)")
    p.add_argument("--run-id", metavar="ID", help="id shared by all ranks (default: random)")
    p.add_argument("--pp-size", type=int, metavar="N", help="pipeline-parallel size, when the "
                   "engine does not expose it (pp rank = rank // tp size)")
    p.add_argument("--tp-size", type=int, metavar="N", help="tensor-parallel size, likewise")
    add_export_arguments(p)
    p.add_argument("--native-build", choices=autobuild.MODES, default="auto",
                   help="build pptrace's native reader (the faster hot path) where this torch "
                        "and Python have none and a C++ compiler is present: auto (default) in "
                        "a background process, taken up by the running processes when it lands "
                        "(about 20 s) and used by those started after it; wait: "
                        "before COMMAND starts; off: never (so does PPTRACE_NATIVE=0)")
    p.add_argument("--print-env", action="store_true",
                   help="print the variables as shell 'export' lines instead of running")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after '--'")
    p.set_defaults(func=run)
    return p


def build_env(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment COMMAND runs in: ``environ`` plus pptrace's variables (the run id the
    launcher shares across nodes, when it names one: one job, one run)."""
    env = dict(environ)
    env["PPTRACE_ENABLED"] = "1"
    for option, var in _OPTION_ENV:
        value = getattr(args, option, None)
        if value is not None:
            env[var] = str(value)
    shared = launchers.shared_run_id(list(getattr(args, "command", None) or ()), environ)
    env.setdefault("PPTRACE_RUN_ID", shared or uuid.uuid4().hex[:16])
    if getattr(args, "targets", None):
        env["PPTRACE_TARGETS"] = format_targets(as_targets(args.targets))
    env = export_env(args, env)  # validates every PPTRACE_* value, targets included
    paths = [bootstrap_dir()] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                 if p and p != bootstrap_dir()]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run(args: argparse.Namespace) -> int:
    """Exec COMMAND in pptrace's environment (or print that environment)."""
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    env = build_env(args, os.environ)
    if args.print_env:
        for name in sorted(env):
            if name.startswith("PPTRACE_") or name == "PYTHONPATH" or (
                    name.startswith("OTEL_") and env[name] != os.environ.get(name)):
                print(f"export {name}={shlex.quote(env[name])}")
        return 0
    if not command:
        raise ConfigError("pptrace run: no command given (put it after '--')")
    from pptrace.engines.select import installed, selected

    if "PPTRACE_TARGETS" not in env and not any(installed(e) for e in selected()):
        # Said once here, not in every process of the tree. A target of the user's own is not
        # looked for here: it is often found only on the command's path (its script's folder).
        print(f"pptrace: no engine pptrace knows is installed for {sys.executable} (its "
              f"transport module {DEFAULT_MODULE} or an engine's message layer), so nothing is "
              "traced unless a process loads one; to trace a transport module of your own: "
              "pptrace run --target MODULE[:ATTACH,EXTRACT][@PREFIX] -- COMMAND", file=sys.stderr)
    note = launchers.combine_note(command, env.get("PPTRACE_DIR") or "pptrace-traces",
                                  env["PPTRACE_RUN_ID"])
    if note is not None:
        print(note, file=sys.stderr)
    autobuild.launch(getattr(args, "native_build", "auto"), env)  # never raises
    _start_shipper(env)
    env["PPTRACE_RUN_PID"] = str(os.getpid())  # the command's process: exec keeps the pid
    env["PPTRACE_RUN_STATE"] = state = tempfile.mkdtemp(prefix="pptrace-run-")
    try:
        _exec(command, env)
    except ConfigError:
        shutil.rmtree(state, ignore_errors=True)
        raise
    return 127  # only reached in tests that replace _exec


def _start_shipper(env: Mapping[str, str]) -> None:
    """Start the trace directory's OTLP shipper (``pptrace.ship``) when OTLP goes from the
    files; it outlives this process's pid, which the command keeps (``exec``)."""
    from pptrace.export.otlp import protocol
    from pptrace.export.ship_launch import ensure_shipper, ships_from_files
    from pptrace.model.config import Config

    try:
        config = Config.from_env(env)
        if ships_from_files(config.exporters, config.otlp_ship, protocol(env)):
            ensure_shipper(config.trace_dir, watch=os.getpid(), env=env)
    except (ConfigError, OSError) as exc:  # the ranks start one themselves, or say why not
        print(f"pptrace: OTLP shipper not started here: {exc}", file=sys.stderr)


def _exec(command: Sequence[str], env: Mapping[str, str]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], list(command), dict(env))
    except OSError as exc:
        raise ConfigError(f"pptrace run: cannot run {command[0]!r}: {exc.strerror}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pptrace.cli.run ...``: the run command alone (what ``pptrace run`` does)."""
    parser = argparse.ArgumentParser(prog="pptrace")
    sub = parser.add_subparsers(dest="command_name")
    add_parser(sub)
    args = parser.parse_args(["run", *(sys.argv[1:] if argv is None else argv)])
    try:
        return run(args)
    except ConfigError as exc:
        print(f"pptrace: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
