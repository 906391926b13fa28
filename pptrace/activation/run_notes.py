"""What ``pptrace run`` says once per run: where the traces went and what to run next, or why
nothing was traced.

A run has many processes (a launcher, ranks, helpers), each with its own pptrace; none knows the
others. ``pptrace run`` makes a private state folder (``PPTRACE_RUN_STATE``) and names the
command's own process (``PPTRACE_RUN_PID``: ``exec`` keeps the pid), the *root*. Processes leave
empty marker files there: ``patched-PID`` once a target module is patched, ``recorded-PID`` at the
first recorded event. The root, when it is a Python process, says one line when it exits (last:
it waits for its ranks) and removes the folder::

    pptrace: 2 processes recorded; traces in pptrace-traces; next: pptrace analyze pptrace-traces
    pptrace: nothing traced: no process of this run imported mytransport; ...

When the root is not Python (a shell script, say), the first process that records claims a
``said`` marker (``O_CREAT | O_EXCL``: exactly one wins) and says where the traces go instead.

Stdlib only; every function contains its own failures (this is bookkeeping, never the engine's
business). Outside ``pptrace run`` (no ``PPTRACE_RUN_STATE``) nothing here does anything.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys

__all__ = ["is_root", "note", "on_first_record", "root_started"]

STATE_ENV = "PPTRACE_RUN_STATE"
ROOT_ENV = "PPTRACE_RUN_PID"
_noted: set[str] = set()


def _state() -> str | None:
    path = os.environ.get(STATE_ENV, "")
    return path if path and os.path.isdir(path) else None


def is_root() -> bool:
    """True in the process ``pptrace run`` replaced itself with."""
    return os.environ.get(ROOT_ENV, "") == str(os.getpid())


def _claim(name: str, *, exclusive: bool) -> bool:
    """Create the marker ``name`` in the state folder; with ``exclusive``, only the first wins."""
    state = _state()
    if state is None:
        return False
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else 0)
    try:
        os.close(os.open(os.path.join(state, name), flags, 0o600))
    except OSError:
        return False
    return True


def note(kind: str) -> None:
    """Leave this process's ``KIND-PID`` marker (once per process and kind)."""
    key = f"{kind}-{os.getpid()}"
    if key not in _noted:
        _noted.add(key)
        _claim(key, exclusive=False)


def root_started() -> None:
    """In the root: mark that a Python root will speak at exit, and register that."""
    import atexit

    if _claim("root", exclusive=False):
        atexit.register(_root_exit, os.getpid())


def on_first_record(trace_dir: str, exporters: tuple[str, ...]) -> None:
    """This process recorded its first event; the first such process of a rootless run says
    where the traces go."""
    try:
        note("recorded")
        state = _state()
        if state is None or os.path.exists(os.path.join(state, "root")):
            return  # the root says it when the run ends
        if _claim("said", exclusive=True):
            print(f"pptrace: recording; {_where(trace_dir, exporters)}", file=sys.stderr,
                  flush=True)
    except Exception:  # bookkeeping only
        pass


def _where(trace_dir: str, exporters: tuple[str, ...]) -> str:
    parts = []
    if "file" in exporters:
        parts.append(f"traces in {trace_dir}")
    if "otlp" in exporters:
        endpoint = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                    or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "the default collector")
        parts.append(f"spans sent over OTLP to {endpoint}")
    where = " and ".join(parts) or "nothing exported (PPTRACE_EXPORT=none)"
    if "file" in exporters:
        where += f"; next: pptrace analyze {shlex.quote(trace_dir)}"
    return where


def _count(state: str, kind: str) -> int:
    return sum(1 for name in os.listdir(state) if name.startswith(kind + "-"))


def _root_exit(pid: int) -> None:
    """The run's one closing line (a forked child of the root inherits this handler: skipped)."""
    state = _state()
    if state is None or os.getpid() != pid:
        return
    try:
        print(summary(state), file=sys.stderr, flush=True)
    except Exception as exc:  # bookkeeping only
        print(f"pptrace: cannot summarise the run: {type(exc).__name__}: {exc}",
              file=sys.stderr)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def summary(state: str) -> str:
    """The closing line for the run whose markers are in ``state``."""
    from pptrace.engines import engine_of_module
    from pptrace.model.config import Config
    from pptrace.model.target import DEFAULT_TARGETS

    recorded, patched = _count(state, "recorded"), _count(state, "patched")
    config = Config.from_env()
    if recorded:
        who = "1 process" if recorded == 1 else f"{recorded} processes"
        return f"pptrace: {who} recorded; {_where(config.trace_dir, config.exporters)}"
    targets = config.targets
    modules = ", ".join(dict.fromkeys(t.module for t in targets))
    layers = [(t.module, e) for t in targets if (e := engine_of_module(t.module)) is not None
              and e.transport is None]
    if layers:  # an engine's message layer named as a transport: it has no attach/extract
        module, engine = layers[0]
        return (f"pptrace: nothing traced: {module} is {engine.title}'s message layer, not an "
                "attach/extract transport; pptrace traces it with no --target (PPTRACE_ENGINE="
                f"{engine.name} to choose it); did the command's processes send PP messages?")
    if patched:
        who = "1 process" if patched == 1 else f"{patched} processes"
        calls = " or ".join(dict.fromkeys(f"{t.module}.{n}" for t in targets
                                          for n in (t.attach, t.extract)))
        return f"pptrace: nothing traced: {who} loaded {modules}, but none called {calls}"
    if targets == DEFAULT_TARGETS:
        title = getattr(engine_of_module(targets[0].module), "title", "the engine")
        return (f"pptrace: nothing traced: no process of this run imported {modules} ({title}'s "
                "transport module); to trace a transport module of your own: pptrace run "
                "--target MODULE[:ATTACH,EXTRACT][@PREFIX] -- COMMAND")
    return (f"pptrace: nothing traced: no process of this run imported {modules} (the --target "
            "or PPTRACE_TARGETS modules pptrace waits for: is that what the command imports?)")
