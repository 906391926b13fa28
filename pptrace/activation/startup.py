"""Activation in every process: one recorder, the engine patched, flushed at exit and on SIGTERM.

    import pptrace
    pptrace.instrument()             # from code (a Config, or PPTRACE_* variables)
    ...
    pptrace.uninstrument()           # originals back everywhere, spans flushed

    pptrace.instrument(targets="mytransport:send_aux,recv_aux")   # a transport of one's own

Under ``pptrace run`` (or ``PPTRACE_ENABLED=1`` with pptrace's ``sitecustomize`` on
``PYTHONPATH``) every Python process of the tree calls ``activate_from_env`` the moment a target
module (``PPTRACE_TARGETS``; SGLang's transport module by default) has loaded, before anything
imports from it. Activation installs an import hook and patches what is loaded. Only when a
target module is patched does the process
start its recorder thread and register its exit
flush (atexit; SIGTERM when the handler is the default; otherwise the engine's own SIGTERM handler
runs first, recorded, and the flush is final at exit) and, in flight mode,
a SIGUSR1 dump. A process that records nothing writes nothing, unless it is a rank: then its
final stats span says it was traced and made no call (see ``_keeps_idle``). Spans go through
the engine's own SDK tracer provider when it configured one and OTLP export is asked for;
otherwise through pptrace's provider (``pptrace.export.spans.pptrace_provider``).
"""

from __future__ import annotations

import atexit
import collections
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

from pptrace.activation import messages as message_layer
from pptrace.activation import run_notes
from pptrace.activation.patch import EnginePatch
from pptrace.activation.process_sinks import DeferredSink, make_sink, ships_from_files
from pptrace.model.config import Config
from pptrace.model.records import RecorderStats
from pptrace.model.target import Target, as_targets, prefix_of
from pptrace.record.ranks import discover_rank
from pptrace.record.recorder import Recorder
from pptrace.record.sink import MessageSink

__all__ = [
    "activate", "activate_from_env", "active_recorder", "instrument", "times_activated",
    "uninstrument",
]

_TRUE = {"1", "true", "yes", "on"}
Handler = Callable[[int, FrameType | None], Any] | int | None


@dataclass
class _Active:
    """The process's activation (mutable on purpose: it is the one global pptrace keeps)."""

    config: Config
    recorder: Recorder
    patch: EnginePatch
    tracer_provider: Any = None
    armed: bool = False
    wrapped: bool = False  # a target's transport was wrapped (the first set the prefix)
    finished: bool = False
    handlers: dict[int, tuple[Handler, Handler]] = field(default_factory=dict)  # sig: (ours, prev)
    causes: collections.Counter[str] = field(default_factory=collections.Counter)
    processor: Any = None  # the OTLP processor, built when arming (see _arm)
    messages: Any = None  # the message layer's patch (pptrace.activation.messages)
    #: In a forked child: the rank its parent had (a fork inherits its parent's identity, so
    #: a child that claims the same rank is a helper, not a rank of its own; see _keeps_idle).
    inherited: tuple[int | None, int | None, int | None] | None = None

    def on_drop(self, events: int, cause: str) -> None:
        """Hear of spans the OTLP exporter lost: counted in the recorder, named at exit."""
        self.causes[cause] += events
        self.recorder.exporter_dropped(events, cause)


_state: _Active | None = None
_lock = threading.RLock()
_hooks_registered = False


_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        print(f"pptrace: {message}", file=sys.stderr)


def active_recorder() -> Recorder | None:
    """The recorder of this process's activation, if any."""
    return _state.recorder if _state is not None else None


#: How many times ``activate`` (``instrument``) was asked in this process, active or not: the
#: pytest plugin tells a test's own ``instrument()`` from its own by this count.
_asked = 0


def times_activated() -> int:
    """How many times this process asked for activation (``instrument``, the bootstrap)."""
    return _asked


def _note_called() -> None:
    run_notes.note("called")


def activate(
    config: Config | None = None,
    *,
    tracer_provider: Any = None,
) -> Recorder | None:
    """Activate pptrace in this process (idempotent); return its recorder, None when disabled.

    ``tracer_provider``: send spans through this provider (as the OTel instrumentor does).
    The transport modules patched are ``config.targets`` (SGLang's by default).
    """
    global _state, _asked
    with _lock:
        _asked += 1
        if _state is not None:
            return _state.recorder
        config = config if config is not None else Config.from_env()
        if not config.enabled:
            return None
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            # pptrace's spans are OpenTelemetry spans: with the SDK off there is nowhere to go.
            _say_once("OTEL_SDK_DISABLED=true: OpenTelemetry is off, so pptrace records nothing")
            return None
        # The closures below see ``state`` once it is assigned (it is, before any call).
        recorder = Recorder(config, sink_factory=lambda rank: DeferredSink(
            lambda: _first_sink(state), lambda stats: _keeps_idle(state, stats)))
        recorder.on_first_call = _note_called
        patch = EnginePatch(lambda a, e, t: _wrap(state, a, e, t), config.targets)
        state = _Active(config, recorder, patch, tracer_provider=tracer_provider)
        _state = state
        _register_process_hooks()
        state.patch.apply()
        state.messages = message_layer.start(config, recorder, lambda: _arm(state),
                                             _engines(config))
        return recorder


def _engines(config: Config) -> tuple[Any, ...]:
    """The engines whose message layers this process traces (``PPTRACE_ENGINE``, else the
    installed ones); a name that is no engine is said once and none is traced."""
    from pptrace.engines.select import UnknownEngineError, selected

    try:
        return selected(config.engines, on_error=_say_once)
    except UnknownEngineError as exc:
        _say_once(f"{exc}; not tracing any engine's PP messages")
        return ()


def instrument(
    config: Config | None = None,
    *,
    targets: str | Target | Sequence[str | Target] | None = None,
    **overrides: Any,
) -> Recorder | None:
    """Patch the engine in this process and start recording (``Config`` fields as overrides).

    ``targets``: the transport modules to trace, as ``MODULE[:ATTACH,EXTRACT][@PREFIX]``
    strings or ``Target`` records (default: ``PPTRACE_TARGETS``, else SGLang's module); a
    malformed one raises ``ConfigError``.
    """
    provider = overrides.pop("tracer_provider", None)
    if targets is not None:
        overrides["targets"] = as_targets(targets)
    if overrides:
        config = replace(config or Config.from_env(), **overrides)
    return activate(config, tracer_provider=provider)


def uninstrument() -> None:
    """Restore the engine's functions everywhere and flush what was recorded (idempotent)."""
    global _state
    with _lock:
        state, _state = _state, None
    if state is None:
        return
    state.patch.restore()
    message_layer.stop(state.messages)
    _finish(state)
    for signum, (ours, previous) in state.handlers.items():
        try:
            if signal.getsignal(signum) is ours:
                signal.signal(signum, previous)
        except (ValueError, OSError, TypeError):  # not the main thread, or not restorable
            pass


def activate_from_env() -> Recorder | None:
    """Activate when ``PPTRACE_ENABLED`` is set (sitecustomize); never raise into the engine."""
    if os.environ.get("PPTRACE_ENABLED", "").strip().lower() not in _TRUE:
        return None
    try:
        return activate(Config.from_env())
    except Exception as exc:
        print(f"pptrace: not tracing this process ({sys.executable}): "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return None


# --- wrapping and arming ----------------------------------------------------------------------


def _wrap(state: _Active, attach: Any, extract: Any, target: Target) -> tuple[Any, Any]:
    """Build the wrappers (imports torch, which the engine module has just loaded) and arm.

    The first target wrapped sets the process's prefix (None: learnt by the recorder); a
    second target with another prefix still records its keys, named in full."""
    from pptrace.record.learnt import wrap_learning
    from pptrace.record.wrapper import wrap_transport

    prefix = prefix_of(target)
    if not state.wrapped:
        state.wrapped = True
        state.recorder.prefix = prefix
    wrapped = (wrap_learning(attach, extract, state.recorder) if prefix is None
               else wrap_transport(attach, extract, state.recorder, prefix))
    _arm(state)
    return wrapped


def _arm(state: _Active) -> None:
    """Start the recorder and register its exit flush: only once the engine is patched."""
    if state.armed:
        return
    state.armed = True
    state.recorder.start()
    run_notes.note("patched")
    if "otlp" in state.config.exporters and state.tracer_provider is None and not (
            ships_from_files(state.config)):
        # Now, not at the first flush: the exporter's import runs SDK code that needs a thread
        # pool, which refuses work once the interpreter exits (a short run's first flush).
        # About 0.3 s once, at the engine's start-up, and only when OTLP is asked for.
        try:
            from pptrace.export.otlp_json import otlp_sender

            state.processor = otlp_sender(state.config, on_drop=state.on_drop)
        except Exception as exc:
            state.recorder.warn("cannot set up OTLP export", f"{type(exc).__name__}: {exc}")
    _prepare()
    if threading.current_thread() is threading.main_thread():
        _install(state, signal.SIGTERM, _on_sigterm)
        if state.config.mode == "flight" and hasattr(signal, "SIGUSR1"):
            _install(state, signal.SIGUSR1, _on_sigusr1)
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        # A forked multiprocessing child leaves through os._exit: atexit never runs there.
        mp_util.Finalize(None, _finish_active, exitpriority=0)


def _prepare() -> None:
    """Import the sinks (the OTel SDK) now, on this thread, rather than in the exit flush.

    Here and not in a thread of pptrace's: a fork while another thread is importing leaves the
    child a half-imported module whose lock no thread will release, so that the child's own
    import of it (OTel's SDK, which engines import too) hangs for ever; and waiting for such a
    thread at each fork made the engine's forks slow (0.18 s instead of 0.004 s; up to the wait's
    5 s bound). This costs about 0.06-0.1 s once, where the engine loads its transport module
    (or calls ``instrument()``), never on a call or a fork.
    """
    try:
        import pptrace.export.sinks  # noqa: F401
    except Exception:  # the flush will meet the same error and report it
        pass


def _install(state: _Active, signum: int, handler: Callable[[int, FrameType | None], None]) -> None:
    try:
        previous = signal.getsignal(signum)
        if previous is signal.SIG_IGN or previous is None:
            return  # ignored on purpose, or set outside Python: leave it be
        signal.signal(signum, handler)
        state.handlers[signum] = (handler, previous)
    except (ValueError, OSError):
        pass


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    state = _state
    previous: Handler = signal.SIG_DFL
    if state is not None:
        previous = state.handlers.get(signum, (None, signal.SIG_DFL))[1]
    if callable(previous):
        # The engine's own handler runs first, still recorded: an engine that drains on SIGTERM
        # makes its last calls there (or on its main loop once it returns). What is buffered is
        # written on the way (a request the recorder thread serves: safe in a handler); the
        # counts become final at exit (atexit, multiprocessing's finalizer), after the last call.
        if state is not None:
            state.recorder.request_dump()
        previous(signum, frame)
        if state is not None:
            state.recorder.request_dump()
        return
    if state is not None:  # the default action kills the process: final now
        _finish(state)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _on_sigusr1(signum: int, frame: FrameType | None) -> None:
    state = _state
    if state is None:
        return
    state.recorder.request_dump()
    previous = state.handlers.get(signum, (None, None))[1]
    if callable(previous):
        previous(signum, frame)


def _register_process_hooks() -> None:
    global _hooks_registered
    if _hooks_registered:
        return
    _hooks_registered = True
    atexit.register(_finish_active)
    if hasattr(os, "register_at_fork"):
        # Nothing before the fork, nothing after it in the parent: pptrace never delays a fork.
        os.register_at_fork(after_in_child=_after_fork)


def _finish_active() -> None:
    state = _state
    if state is not None:
        _finish(state)


def _finish(state: _Active) -> None:
    """Flush within the exit timeout (once), and say what was lost."""
    with _lock:
        if state.finished or not state.armed:
            return
        state.finished = True
    recorder = state.recorder
    try:
        recorder.shutdown()
        stats = recorder.stats()
    except Exception as exc:
        print(f"pptrace: exit flush failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    message = exit_message(stats, state.causes)
    if message:
        print(message, file=sys.stderr, flush=True)


def exit_message(stats: RecorderStats, causes: collections.Counter[str]) -> str:
    """The one line printed at exit when anything was lost (empty when all went through).

    ``dropped`` is what no sink received; what one sink lost after taking the events (OTLP's
    failed batches, which the trace file still has) follows as "N lost by SINK", so that
    "0 dropped" never stands for the whole truth when a sink lost spans. ``causes`` are the
    OTLP exporter's reasons, by count.
    """
    sink_losses = [(sink, n) for sink, n in stats.sink_dropped if n]
    if not (stats.dropped or sink_losses or stats.export_errors or stats.internal_errors):
        return ""
    why = ", ".join(f"{n} {cause}" for cause, n in causes.most_common()) or "see the log"
    who = stats.rank.label() + (f" pid {stats.rank.pid}" if stats.rank.rank is not None else "")
    counts = [f"{stats.recorded} events recorded", f"{stats.dropped} dropped"]
    counts += [f"{n} lost by {sink}" for sink, n in sink_losses]
    if stats.rotated:  # deleted on purpose (the disk budget), but not in the file either
        counts.append(f"{stats.rotated} deleted by rotation")
    counts += [f"{stats.export_errors} export errors", f"{stats.internal_errors} internal errors"]
    return f"pptrace: {who}: {', '.join(counts)} (lost spans: {why})"


def _after_fork() -> None:
    """In a forked child: a fresh recorder (the parent's thread does not exist here)."""
    global _state, _lock
    _lock = threading.RLock()
    state, _state = _state, None
    if state is None:
        return
    # The parent's recorder has no thread here: a wrapper of it still held somewhere (inside
    # someone else's wrapper, a partial) must pass calls through, not fill a dead buffer.
    state.recorder.enabled = False
    state.recorder.buffer.clear()
    try:
        # What the child would claim as inherited (env, the parent's groups): asked directly,
        # not through the parent's rank cache, whose lock another parent thread may have held.
        parent, _ = discover_rank(state.config.rank_overrides)
        state.patch.restore()
        message_layer.stop(state.messages)
        activate(state.config, tracer_provider=state.tracer_provider)
        if _state is not None:
            _state.inherited = (parent.rank, parent.pp_rank, parent.tp_rank)
    except Exception as exc:
        print(f"pptrace: not tracing forked process {os.getpid()}: {exc}", file=sys.stderr)


# --- sinks ------------------------------------------------------------------------------------


def _first_sink(state: _Active) -> MessageSink:
    """The real sink, opened at this process's first event (which ``pptrace run`` notes), or
    for the final stats of a rank that made no call (which it does not: nothing was recorded)."""
    stats = state.recorder.stats()
    if stats.recorded or stats.messages_recorded or stats.dropped:
        run_notes.on_first_record(state.config.trace_dir, state.config.exporters)
    return make_sink(state, _finish_active)


def _keeps_idle(state: _Active, stats: RecorderStats) -> bool:
    """Whether a process that recorded nothing writes its final stats: only a rank does.

    pptrace is armed here, so a transport or an engine's message module was patched (a launcher
    or a tokenizer worker that never imports one never gets this far). Beyond that the process
    must know a rank of its own at exit (torch.distributed, the engine's PP/TP groups, or the
    launcher's ``RANK``/``WORLD_SIZE``): a rankless process's empty file would be read as a
    rank. A forked child whose rank is its parent's (a data-loader worker, a helper) inherited
    that identity and is no rank either. Then "traced, final stats, never called attach" is
    evidence the analyzer can use (the TP-broadcast layout's quiet ranks).
    """
    rank = stats.rank
    if "torch.distributed" not in sys.modules or (rank.rank is None and rank.pp_rank is None):
        return False
    return state.inherited is None or state.inherited != (rank.rank, rank.pp_rank, rank.tp_rank)
