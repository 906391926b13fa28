"""The optional native metadata reader: the tensor reads of the hot path in one C++ call.

    pptrace native build      # compile it once for this torch and Python (needs a C++ compiler)
    pptrace native status     # where it is, and whether a process here would use it

Reading ``shape``, ``dtype``, ``device`` and ``is_contiguous()`` from Python costs about 0.4 µs a
tensor here, most of an event's cost on the engine's thread. ``native_meta.cpp`` reads the same
fields for all of a dict's auxiliary tensors in one call (about 0.05 µs a tensor) into one bytes
object, which the recorder thread decodes.

It is never built on the engine's path: ``build()`` (``pptrace native build``) compiles it
against the installed torch into a cache directory named by everything the binary depends on
(source, torch build, Python, platform). ``reader()`` only loads a library built for exactly this
process, and only after it has read a set of probe tensors exactly as the Python reads do and
named its raw record's fields as ``pptrace.model.raw.RAW_FIELDS`` does (so a field added on one
side only is refused, loudly in ``tests/test_native.py``); any failure leaves the wrappers on
their Python reads, which record the same events.
``PPTRACE_NATIVE=0`` (``Config.native``) keeps the wrappers on the Python reads.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from pptrace.model.errors import PptraceError
from pptrace.model.raw import RAW_FIELDS
from pptrace.model.records import Direction
from pptrace.record import native_files

__all__ = ["Status", "arrived", "build", "decode", "library_path", "loaded", "reader", "status",
           "waiting"]

MODULE = "pptrace_meta"
ENV_DIR = "PPTRACE_NATIVE_DIR"


@dataclass(frozen=True)
class Status:
    """Where the native reader is and whether this process uses it (``reason`` says why not)."""

    path: Path
    built: bool
    loaded: bool
    reason: str


def cache_root() -> Path:
    """``$PPTRACE_NATIVE_DIR``, else ``$XDG_CACHE_HOME/pptrace/native``, else ``~/.cache/...``."""
    explicit = os.environ.get(ENV_DIR)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pptrace" / "native"


def build_key() -> str:
    """What the binary depends on, hashed: a change in any of them means a new build."""
    parts = [
        *(p.read_bytes() for p in native_files()),
        torch.__version__.encode(),
        str(getattr(torch.version, "git_version", "")).encode(),
        str(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", "")).encode(),
        sys.implementation.cache_tag.encode(),
        sys.version.encode(),
        platform.machine().encode(),
        platform.system().encode(),
    ]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:20]


def library_path() -> Path:
    """Where this process's build of the reader lives (whether or not it exists)."""
    return cache_root() / build_key() / f"{MODULE}.so"


def _compile_command(out: Path) -> list[str]:
    from torch.utils import cpp_extension

    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise PptraceError("pptrace native build: no C++ compiler found (install g++ or set CXX)")
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    libs = cpp_extension.library_paths()
    cmd = [cxx, "-O2", "-std=c++20", "-shared", "-fPIC", "-fvisibility=hidden",
           f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    cmd += [f"-isystem{p}" for p in cpp_extension.include_paths()]
    cmd += [f"-isystem{sysconfig.get_paths()['include']}"]
    cmd += [str(p) for p in native_files() if p.suffix == ".cpp"] + ["-o", str(out)]
    cmd += [f"-L{p}" for p in libs] + [f"-Wl,-rpath,{p}" for p in libs]
    cmd += ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]
    return cmd


def build(verbose: bool = False) -> Path:
    """Compile the reader for this torch and Python (about 20 s); return the library's path.

    Idempotent: an existing build for the same key is kept. The library is written under a
    temporary name and renamed into place, so that processes loading it meanwhile never see half
    a file. Raises ``PptraceError`` (one line) when there is no compiler or the build fails.
    """
    path = library_path()
    if path.exists():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return _build_into(path, verbose)
    except OSError as exc:
        raise PptraceError(f"pptrace native build: cannot write {path.parent} "
                           f"({type(exc).__name__}: {exc.strerror or exc}); "
                           f"set {ENV_DIR} to a writable folder") from None


def _build_into(path: Path, verbose: bool) -> Path:
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as tmp:
        out = Path(tmp) / f"{MODULE}.so"
        cmd = _compile_command(out)
        if verbose:
            print(" ".join(cmd), file=sys.stderr)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as exc:
            raise PptraceError(f"pptrace native build: cannot run the compiler {cmd[0]!r} "
                               f"({type(exc).__name__}: {exc})") from None
        if proc.returncode != 0:
            errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
            first = (errors or proc.stderr.strip().splitlines() or ["(no output)"])[0]
            raise PptraceError(f"pptrace native build: the compiler failed "
                               f"(exit {proc.returncode}): {first.strip()[:300]}")
        os.replace(out, path)
    return path


_lock = threading.Lock()
_loaded: tuple[ModuleType | None, str] | None = None
#: Where the build was looked for when ``reader()`` found none: a build landing there later
#: (``pptrace run``'s background build) is taken up by ``arrived()``. None once loaded, or when
#: the reader failed for another reason (those are not tried again).
_awaited: Path | None = None


def _import(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python_meta(t: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(t.shape), t.dtype, t.device, t.is_contiguous())


def _probes() -> list[torch.Tensor]:
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    return [
        base,
        base.transpose(0, 2),  # not contiguous
        base[:, 1],  # a view with an offset
        torch.tensor(7, dtype=torch.int64),  # 0-dim
        torch.empty(0, 5, dtype=torch.bool),
        torch.zeros(3, dtype=torch.bfloat16),
        torch.zeros(2, 2, dtype=torch.complex64),
        torch.zeros(1, 2, 3, 4, dtype=torch.uint8).to(memory_format=torch.channels_last),
        torch.empty(2**33, 0, device="meta"),
        torch.zeros(4, dtype=torch.float16, requires_grad=True),
    ]


def _self_test(module: ModuleType) -> str:
    """'' when the library builds raws of Python's layout and reads the probes exactly as Python
    does, else what differed."""
    fields = getattr(module, "RAW_FIELDS", None)
    if fields != RAW_FIELDS:
        return f"the library's raw layout {fields!r} is not pptrace.model.raw's {RAW_FIELDS!r}"
    probes = _probes()
    d: dict[Any, Any] = {"next_token_ids": probes[0]}
    d.update((f"p{i}", t) for i, t in enumerate(probes))
    packed = module.inserted(d, 1)
    if type(packed) is not bytes:
        return "the reader returned no metadata for plain tensors"
    got = decode(packed, module)
    want = [_python_meta(t) for t in probes]
    if got != want:
        return "the reader's metadata differs from Python's reads"
    if module.prefixed(d, "p") != packed:
        return "the reader's prefix scan differs from its positional scan"
    for odd in ([1], torch.nn.Parameter(torch.zeros(1)), torch.zeros(2).to_sparse()):
        if module.inserted({"x": odd}, 0) is not None:
            return f"the reader took a {type(odd).__name__} it must leave to Python"
    return _render_test(module)


def _render_test(module: ModuleType) -> str:
    """'' when the library's span renderer fills a template's holes from a raw of Python's
    layout as ``FileSink`` does (each field a value of its own, so a field read from the wrong
    place shows), else what differed."""
    fields = dict.fromkeys(RAW_FIELDS)
    fields.update(direction=Direction.ATTACH, seq=7, wall_ns=1_000_003, mono_ns=50_011,
                  duration_ns=29, thread=5, subject=int, keys_before=("a",),
                  keys_after=("a", "b"), items=b"\x01", returned_none=True, dropped=3)
    raw = tuple(fields[name] for name in RAW_FIELDS)
    key = (True, 5, "main", int, ("a",), ("a", "b"), b"\x01", True, None)
    parts = tuple("<>|" + chr(65 + i) for i in range(9))
    prefix, mask = 0xABC, 2**64 - 1
    ctx = (itertools.count(41).__next__, prefix, "[", "]", {5: "main"}, Direction.ATTACH,
           Direction.EXTRACT, 64)
    pieces: list[str] = ["["]
    got = module.render([raw, raw], 0, {(key, True): (None, parts, bytes(range(8)))}, ctx,
                        pieces, [], 0)
    values = [f"{prefix << 64 | 41:032x}", f"{(prefix + 41) & mask:016x}", "1000003",
              "1000032", "7", "50011", "29", "3"]
    want = "".join(p + v for p, v in zip(parts, [*values, ""], strict=True))
    if got != (2, 2, 0) or pieces[1] != want:
        return "the span renderer's text differs from the template's"
    return ""


def reader() -> ModuleType | None:
    """The loaded reader, or None (not built for this process, or it failed to load or its
    self-test: ``status().reason`` says which). Loads at most once per process; never builds."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _load()
    return _loaded[0]


def loaded() -> ModuleType | None:
    """The reader if this process has loaded it, else None; never loads it."""
    found = _loaded
    return None if found is None else found[0]


def arrived() -> ModuleType | None:
    """``reader()``, loading the reader now if it was not built when this process first asked
    and has been built since: a background build that landed while the process ran. One
    ``stat`` while none has landed; never builds, never blocks on a build."""
    global _loaded, _awaited
    if reader() is None and _awaited is not None and _awaited.exists():
        with _lock:
            if _awaited is not None:  # another thread may have loaded it meanwhile
                _loaded = _load()
    return reader()


def waiting() -> bool:
    """Whether ``arrived()`` may still load a reader: none was built at the first ask (a reader
    that failed to load or its self-test stays unused)."""
    reader()
    return _awaited is not None


def _load() -> tuple[ModuleType | None, str]:
    global _awaited
    _awaited = None
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        # Its C code relies on the GIL (dict iteration, the record's append).
        return None, "not for a free-threaded Python (the Python wrapper records instead)"
    try:
        path = library_path()
    except Exception as exc:  # an unreadable source file: the package is broken, not the engine
        return None, f"cannot name the build ({type(exc).__name__}: {exc})"
    if not path.exists():
        _awaited = path
        return None, "not built for this torch and Python (run: pptrace native build)"
    try:
        module = _import(path)
        problem = _self_test(module)
    except Exception as exc:
        return None, f"failed to load ({type(exc).__name__}: {exc})"
    if problem:
        return None, f"failed its self-test: {problem}"
    return module, "in use"


def status() -> Status:
    """Where the reader is for this process, and whether ``reader()`` uses it."""
    module = reader()
    path = library_path()
    assert _loaded is not None
    return Status(path=path, built=path.exists(), loaded=module is not None,
                  reason=_loaded[1])


_DTYPES: dict[int, Any] = {}
_DEVICES: dict[tuple[int, int], Any] = {}


def decode(packed: bytes, module: ModuleType | None = None) -> list[tuple[Any, ...]]:
    """Packed metadata to ``[(shape, dtype, device, contiguous), ...]``: the Python reads' values
    (shape as a plain tuple). Raises ValueError on a malformed buffer."""
    mod = module or reader()
    if mod is None:
        raise ValueError("packed metadata without a native reader")
    fields = memoryview(packed).cast("q").tolist()
    out: list[tuple[Any, ...]] = []
    i, n = 0, len(fields)
    while i < n:
        ndim = fields[i]
        end = i + 1 + ndim + 4
        if ndim < 0 or end > n:
            raise ValueError("truncated native metadata")
        shape = tuple(fields[i + 1:i + 1 + ndim])
        code, dev_type, dev_index, contiguous = fields[end - 4:end]
        dtype = _DTYPES.get(code)
        if dtype is None:
            dtype = _DTYPES[code] = mod.dtype(code)
        device = _DEVICES.get((dev_type, dev_index))
        if device is None:
            device = _DEVICES[(dev_type, dev_index)] = mod.device(dev_type, dev_index)
        out.append((shape, dtype, device, bool(contiguous)))
        i = end
    return out
