"""The native reader built by itself where a C++ compiler is present, never on the engine's path.

    pptrace run -- COMMAND                       # no build for this torch and Python yet: one
                                                 # starts in the background (taken up when it
                                                 # lands, by the running processes too)
    pptrace run --native-build wait -- COMMAND   # build it (if missing) before COMMAND starts
    pptrace run --native-build off -- COMMAND    # never; PPTRACE_NATIVE=0 keeps it off too

``pptrace run``'s launcher calls ``launch``. It must stay quick, so it never imports torch: it
looks for a stamp named by what it sees without torch (this Python, torch's installed version
file, the reader's source, the cache folder). No stamp, and a compiler on ``PATH`` (or
``$CXX``): it starts ``python -m pptrace.activation.autobuild`` detached (a session of its own,
its parent gone at once, so that nothing of the engine waits for it or has to reap it). That
process imports torch and, when ``pptrace.record.native`` has no build for this exact torch
and Python, says so in one line, then writes its output to ``build.log`` in the cache folder
(it never holds the engine's terminal or pipes), builds (``native.build``: cached as ``pptrace
native build`` caches it, written atomically) and writes the stamp: built, or the build's
one-line error, which the next ``pptrace run`` says once before using the Python wrapper. One
build runs at a time (a lock); a process that starts after the build uses the reader, and one
already running takes it up when it lands (``pptrace.record.hot``).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, NamedTuple

from pptrace.model.config import Config
from pptrace.model.errors import PptraceError
from pptrace.record import native_files

__all__ = ["MODES", "Stamp", "build_now", "launch", "stamp_path"]

#: ``--native-build`` values: in the background (default), before the command, never.
MODES = ("auto", "wait", "off")
_STAMP_BYTES = 64 * 1024  # a stamp is a few hundred bytes; anything longer is not one


class Stamp(NamedTuple):
    """What the last automatic build for this environment ended in."""

    ok: bool
    library: str  # the library's path (ok), else ""
    error: str  # the build's one-line error (not ok), else ""
    reported: bool  # that error was said once already


def compiler(env: Mapping[str, str]) -> str | None:
    """The C++ compiler a build would use (as ``pptrace.record.native`` picks it), or None."""
    return env.get("CXX") or shutil.which("c++") or shutil.which("g++")


def _cache_root(env: Mapping[str, str]) -> Path:
    # As pptrace.record.native.cache_root, which the launcher cannot import (it imports torch).
    explicit = env.get("PPTRACE_NATIVE_DIR")
    if explicit:
        return Path(explicit)
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pptrace" / "native"


def stamp_path(env: Mapping[str, str]) -> Path | None:
    """Where this environment's stamp lives, named without importing torch (None: no torch)."""
    try:
        spec = importlib.util.find_spec("torch")  # finds it; does not import it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    version = Path(list(spec.submodule_search_locations)[0]) / "version.py"
    root = _cache_root(env)
    parts = [sys.executable.encode(), sys.version.encode(), platform.machine().encode(),
             platform.system().encode(), str(root).encode(),
             *(p.read_bytes() for p in native_files()),
             version.read_bytes() if version.is_file() else b""]
    key = hashlib.sha256(b"\0".join(parts)).hexdigest()[:20]
    return root / "auto" / f"{key}.json"


def read_stamp(path: Path) -> Stamp | None:
    """The stamp at ``path``, or None when there is none (or it is not one)."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(_STAMP_BYTES).decode("utf-8"))
        return Stamp(ok=data["ok"] is True, library=str(data.get("library", "")),
                     error=str(data.get("error", "")), reported=data.get("reported") is True)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _write_stamp(path: Path, stamp: Stamp) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(stamp._asdict()))
    os.replace(tmp, path)


def launch(mode: str, env: Mapping[str, str], err: IO[str] | None = None) -> None:
    """What ``pptrace run`` does before COMMAND starts (``mode``: one of ``MODES``). Never
    raises: a reader that cannot be built leaves the Python wrapper, which records the same."""
    err = err or sys.stderr
    try:
        if mode == "off" or not Config.from_env(env).native or compiler(env) is None:
            return
        if mode == "wait":
            build_now(err)
            return
        path = stamp_path(env)
        if path is None:
            return  # no torch for this Python: nothing to build against
        stamp = read_stamp(path)
        if stamp is None or (stamp.ok and not os.path.exists(stamp.library)):
            _spawn(env)
        elif not stamp.ok and not stamp.reported:
            print(f"pptrace: the native reader's background build failed: {stamp.error}; the "
                  "Python wrapper records instead (pptrace native build --verbose to retry)",
                  file=err, flush=True)
            _write_stamp(path, stamp._replace(reported=True))
    except Exception as exc:  # never a reason not to run the command
        print(f"pptrace: cannot start the native reader's build ({type(exc).__name__}: {exc}); "
              "the Python wrapper records instead", file=err, flush=True)


def _spawn(env: Mapping[str, str]) -> None:
    """Start the builder detached: a child of a child that exits at once (adopted by init)."""
    # The launcher's own environment (its PYTHONPATH has no bootstrap folder): not traced.
    builder_env = {k: v for k, v in os.environ.items() if k != "PPTRACE_ENABLED"}
    for name in ("PPTRACE_NATIVE_DIR", "XDG_CACHE_HOME", "CXX", "PATH"):
        if name in env:
            builder_env[name] = env[name]
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            subprocess.Popen([sys.executable, "-m", "pptrace.activation.autobuild"],
                             env=builder_env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, close_fds=True)
            code = 0
        finally:
            os._exit(code)
    os.waitpid(pid, 0)


def build_now(err: IO[str]) -> bool:
    """Build the reader here, now, when this torch and Python have none (one line said); True
    when a build is there. The launcher's ``--native-build wait``."""
    import torch

    from pptrace.record import native

    path = native.library_path()
    stamp = stamp_path(os.environ)
    if path.exists():
        return True
    print(f"pptrace: building the native reader for torch {torch.__version__} before the "
          "command starts (about 20 s) ...", end=" ", file=err, flush=True)
    start = time.monotonic()
    try:
        native.build()
    except PptraceError as exc:
        print(f"failed: {exc}; the Python wrapper records instead", file=err, flush=True)
        if stamp is not None:
            _write_stamp(stamp, Stamp(ok=False, library="", error=str(exc), reported=True))
        return False
    print(f"built in {time.monotonic() - start:.0f} s ({path})", file=err, flush=True)
    if stamp is not None:
        _write_stamp(stamp, Stamp(ok=True, library=str(path), error="", reported=False))
    return True


def _background() -> int:
    """The detached builder: build once for this environment, then leave a stamp."""
    stamp = stamp_path(os.environ)
    if stamp is None:
        return 0
    stamp.parent.mkdir(parents=True, exist_ok=True)
    with open(stamp.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another start is building it
        import torch

        from pptrace.record import native

        path = native.library_path()
        if not path.exists():
            print(f"pptrace: building the native reader for torch {torch.__version__} in the "
                  "background (about 20 s, once; running processes take it up when it lands): "
                  f"{path.parent}", file=sys.stderr, flush=True)
            _to_log(stamp.parent / "build.log")
            try:
                native.build()
            except PptraceError as exc:
                print(exc, file=sys.stderr, flush=True)
                _write_stamp(stamp, Stamp(ok=False, library="", error=str(exc), reported=False))
                return 2
        _write_stamp(stamp, Stamp(ok=True, library=str(path), error="", reported=False))
        return 0


def _to_log(path: Path) -> None:
    """Let go of the launcher's terminal (or the pipe a test reads): output goes to ``path``."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError:
        fd = os.open(os.devnull, os.O_WRONLY)
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)


if __name__ == "__main__":
    sys.exit(_background())
