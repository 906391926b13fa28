"""Start the OTLP shipper of a trace directory, once: the engine's side of ``pptrace.ship``.

OTLP (``http/json``, ``http/protobuf``, ``grpc``) is shipped from the trace files by a process of
its own (``pptrace ship DIR``), so that the engine's process only writes its trace file. One shipper
runs per trace directory: it holds an exclusive ``flock`` on ``LOCK_NAME`` in the directory for its
life, so ``shipper_running`` is a non-blocking try of that lock, and of two processes that start one
at once, one takes the lock and the other starts nothing. ``pptrace run`` starts it before any rank;
otherwise (``pptrace.instrument()``, the demo's ranks, ``PPTRACE_ENABLED=1``) the first process that
opens its trace file starts it, if none runs. Standard library only: activation imports this on the
engine's start-up path.

    ensure_shipper("pptrace-traces", watch=os.getpid())   # its pid, or None when one runs
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

try:
    import fcntl
except ImportError:  # not POSIX: no shipper process (OTLP goes inline there)
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_NAME", "SHIPPED_PROTOCOLS", "STATE_NAME", "can_ship", "ensure_shipper",
    "ships_from_files", "shipper_running", "wait_for_shipper",
]

#: Held (flock) by the directory's shipper for its life.
LOCK_NAME = ".pptrace-ship.lock"
#: The shipper's positions in each file and its counts (JSON; not a trace file: no .json end).
STATE_NAME = "pptrace-ship.state"

#: The OTLP protocols the shipper speaks (``OTEL_EXPORTER_OTLP_PROTOCOL``); gRPC needs grpcio
#: (``pip install 'pptrace[otlp]'``): without it, OTLP stays in the engine's process, whose
#: exporter set-up says what is missing.
SHIPPED_PROTOCOLS = ("http/json", "http/protobuf", "grpc")

#: Shippers this process started (their pids), reaped once they exit.
_started: list[int] = []


def can_ship() -> bool:
    """Whether this platform runs a shipper process (it needs ``flock``)."""
    return fcntl is not None


def ships_from_files(exporters: Sequence[str], otlp_ship: str, protocol: str) -> bool:
    """Whether OTLP goes out of process: asked for over a protocol the shipper speaks
    (``SHIPPED_PROTOCOLS``) beside the trace files, ``PPTRACE_OTLP_SHIP`` not ``inline``, on a
    platform with ``flock``."""
    return ("otlp" in exporters and "file" in exporters and otlp_ship == "files"
            and protocol in SHIPPED_PROTOCOLS and fcntl is not None
            and (protocol != "grpc" or _installed("grpc")))


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def shipper_running(trace_dir: str) -> bool:
    """Whether a shipper holds the directory's lock now."""
    if fcntl is None:
        return False
    try:
        fd = os.open(os.path.join(trace_dir, LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file: no shipper ever ran here
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def ensure_shipper(trace_dir: str, watch: int | None = None,
                   env: Mapping[str, str] | None = None) -> int | None:
    """Start the directory's shipper unless one runs (its pid); ``watch``: a process it
    outlives.

    The shipper gets this process's stderr (its one closing line, when something was lost), no
    stdin nor stdout, and a session of its own (a Ctrl-C meant for the engine is not its end:
    it ends when the files are final). ``env`` (default ``os.environ``) holds the
    ``OTEL_EXPORTER_OTLP_*`` settings it posts with.
    """
    if fcntl is None:
        return None
    # The lock is taken here and handed to the child (an inherited open file keeps it), so it
    # is held without a gap from this test to the shipper's end: a process that looks now,
    # while the shipper is still starting, sees it running.
    os.makedirs(trace_dir, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(trace_dir, LOCK_NAME),
                 os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # a shipper runs
        child_env = dict(os.environ if env is None else env)
        child_env.pop("PPTRACE_ENABLED", None)  # the shipper traces nothing itself
        argv = [sys.executable, "-m", "pptrace", "ship", os.path.abspath(trace_dir),
                "--lock-fd", str(fd)]
        if watch is not None:
            argv += ["--watch", str(watch)]
        # posix_spawn, not Popen: no object whose collection warns while the shipper runs
        # on (it outlives this process's interest in it), and no fork of the engine's process.
        os.set_inheritable(fd, True)
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            pid = os.posix_spawn(argv[0], argv, child_env, setsid=True, file_actions=[
                (os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1)])
        finally:
            os.close(devnull)
    finally:
        os.close(fd)  # the child's copy holds the lock now (or nobody does)
    _reap()
    _started.append(pid)
    return pid


def _reap() -> None:
    """Collect the shippers this process started that have exited (no zombies kept)."""
    for pid in list(_started):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere
            done = pid
        if done:
            _started.remove(pid)


def wait_for_shipper(trace_dir: str, timeout: float) -> bool:
    """Wait (bounded) until no shipper holds the directory; True when none does."""
    import time

    deadline = time.monotonic() + timeout
    while shipper_running(trace_dir):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
