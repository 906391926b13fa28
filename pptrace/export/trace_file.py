"""The trace file on disk: its name, and the writer that appends whole lines to it, safely.

One file per process, named from the rank and the pid only (never from trace content). Each line
is one OTLP/JSON ``TracesData`` document, written whole and flushed to the OS. Compressed
(``PPTRACE_COMPRESS``), each write is one complete gzip member (``.gz``) or zstd frame
(``.zst``): concatenated members are a valid file, and a process killed mid-write leaves a file
that reads to its last whole member.

The trace directory may be shared (``PPTRACE_DIR``), and an engine often runs as root, so the
file is opened so that nobody else can steer the writes:

- the directory is created ``0700``; an existing one must belong to this process's user (or
  root) and be writable by nobody else, else it is refused (``PPTRACE_DIR_UNSAFE_OK=1`` accepts
  it, for a directory shared on purpose); it is opened once and the file is opened relative to
  it, so the directory checked is the directory written;
- the file is created ``0600`` with ``O_CREAT | O_EXCL | O_NOFOLLOW``: never through a symlink
  planted under its name, never onto a file someone else made;
- an existing file (this process's own, from an earlier activation) is appended to only if it
  is a regular file of this user with no other hard link, opened with ``O_NOFOLLOW`` and
  ``O_NONBLOCK`` (a FIFO planted under the name cannot block the open).

A refusal raises ``TraceFileRefused`` (an ``OSError``) with a one-line reason that names the
path, and is final for the process: every later line raises it again, so that the recorder
counts every event it costs (and logs the line once). Nothing reaches the engine.

    path = os.path.join(trace_dir, trace_file_name(rank))   # pptrace-rank3-pid42.otlp.jsonl
    out = TraceFile(path)
    out.write_line(text)           # or out.write(encoder("gzip")([text])) on a .gz path
    out.close()
"""

from __future__ import annotations

import gzip
import logging
import os
import stat
import threading
from collections.abc import Callable, Sequence
from typing import IO

from pptrace.model.errors import ConfigError
from pptrace.model.records import RankInfo

__all__ = [
    "GZIP_LEVEL", "SUFFIXES", "UNSAFE_OK_VARIABLE", "ZSTD_LEVEL", "TraceFile", "TraceFileRefused",
    "encoder", "open_trace_file", "trace_file_name",
]

#: The name's ending per ``PPTRACE_COMPRESS`` value.
SUFFIXES = {"none": "", "gzip": ".gz", "zstd": ".zst"}
#: zlib's default level. Measured on version 2 lines of the demo's payload, one member per flush
#: of 50 events: level 1 gives 138 B an event for 3.6 us of recorder-thread CPU, level 6 102 B
#: for 7.2 us, level 9 96 B for 11.8 us (zlib releases the GIL while it compresses).
GZIP_LEVEL = 6
#: zstd at level 1: on the same flushes 77 B an event for 0.7 us (level 3: 81 B, 1.0 us).
ZSTD_LEVEL = 1
#: Lines (without newlines) -> the bytes one write appends.
Encoder = Callable[[Sequence[str]], bytes]

#: The variable (``Config.dir_unsafe_ok``) that accepts a directory other users can write to.
UNSAFE_OK_VARIABLE = "PPTRACE_DIR_UNSAFE_OK"

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_APPEND = os.O_WRONLY | os.O_APPEND | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC
_POSIX = hasattr(os, "geteuid") and os.open in os.supports_dir_fd


class TraceFileRefused(OSError):
    """The trace directory or file is not safe to write (the message says why, in one line)."""


def trace_file_name(rank: RankInfo, compress: str = "none") -> str:
    """The file name of a process's trace: ``pptrace-rank3-pid42.otlp.jsonl`` (``rankX``
    while the global rank is unknown; ``.gz`` or ``.zst`` added when compressed)."""
    who = f"rank{rank.rank}" if rank.rank is not None else "rankX"
    return f"pptrace-{who}-pid{rank.pid}.otlp.jsonl{SUFFIXES[compress]}"


def _plain(lines: Sequence[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("ascii")


def encoder(compress: str) -> Encoder:
    """What one write appends for ``compress``: the lines, as one gzip member or zstd frame when
    compressed (``ConfigError`` for zstd without the ``zstandard`` package)."""
    if compress == "none":
        return _plain
    if compress == "gzip":
        return lambda lines: gzip.compress(_plain(lines), GZIP_LEVEL, mtime=0)
    if compress == "zstd":
        try:
            import zstandard
        except ImportError:
            raise ConfigError("PPTRACE_COMPRESS=zstd needs the zstandard package "
                              "(pip install zstandard), or use gzip") from None
        compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        lock = threading.Lock()  # one compressor is not to be used by two threads at once

        def zstd(lines: Sequence[str]) -> bytes:
            with lock:
                frame: bytes = compressor.compress(_plain(lines))
            return frame

        return zstd
    raise ConfigError(f"PPTRACE_COMPRESS={compress!r}: expected none, gzip or zstd")


def _check_directory(directory: str, st: os.stat_result) -> None:
    euid = os.geteuid()
    why = None
    if st.st_uid not in (euid, 0):
        why = f"belongs to uid {st.st_uid}, not to this process's uid {euid}"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    if why is not None:
        raise TraceFileRefused(f"trace directory {directory} {why}; not writing there "
                               f"({UNSAFE_OK_VARIABLE}=1 accepts it)")


def _check_file(path: str, st: os.stat_result) -> None:
    why = None
    if not stat.S_ISREG(st.st_mode):
        why = "is not a regular file"
    elif st.st_uid != os.geteuid():
        why = f"belongs to uid {st.st_uid}, not to this process's uid {os.geteuid()}"
    elif st.st_nlink != 1:
        why = f"has {st.st_nlink} hard links"
    if why is not None:
        raise TraceFileRefused(f"trace file {path} exists and {why}; not appending to it")


def open_trace_file(path: str, allow_unsafe_dir: bool = False) -> IO[bytes]:
    """Open ``path`` for appending as the module docstring says (``TraceFileRefused`` if not)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if not _POSIX:  # no owners nor dir_fd here: the flags are all there is
        fd = os.open(path, _APPEND | os.O_CREAT, 0o600)
        return os.fdopen(fd, "ab", buffering=0)
    name = os.path.basename(path)
    dfd = os.open(directory, _DIRECTORY)
    try:
        if not allow_unsafe_dir:
            _check_directory(directory, os.fstat(dfd))
        try:
            fd = os.open(name, _APPEND | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dfd)
        except FileExistsError:
            try:
                fd = os.open(name, _APPEND, dir_fd=dfd)
            except OSError as exc:  # ELOOP: a symlink; ENXIO: a FIFO nobody reads
                raise TraceFileRefused(f"trace file {path} exists and cannot be opened safely "
                                       f"({exc.strerror}); not appending to it") from None
            try:
                _check_file(path, os.fstat(fd))
            except BaseException:
                os.close(fd)
                raise
    finally:
        os.close(dfd)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab", buffering=0)


class TraceFile:
    """Append whole writes (lines, or a compressed member of lines) to one trace file; opened at
    the first write, so that a process that records nothing writes nothing."""

    def __init__(self, path: str, allow_unsafe_dir: bool = False) -> None:
        self.path = path
        self.allow_unsafe_dir = allow_unsafe_dir
        #: Bytes in the file: what it held when opened, and every write since.
        self.size = 0
        self._file: IO[bytes] | None = None
        self._ident: tuple[int, int] = (0, 0)
        self._lock = threading.Lock()
        #: Why the file was refused, once it was: final for this process (every later line
        #: raises the same reason, so that what it held is counted; nothing is tried again).
        self.refused: TraceFileRefused | None = None

    def _replaced(self) -> bool:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return True
        return (st.st_dev, st.st_ino) != self._ident

    def _open(self) -> IO[bytes]:
        if self._file is not None and self._replaced():
            # Deleted under us (file or directory), or something else put in its place: writing
            # on would put every further line into an unlinked file, lost silently; start the
            # file again where it was (as safely as the first time).
            self._file.close()
            self._file = None
            logging.getLogger("pptrace").warning(
                "pptrace: trace file %s was deleted or replaced; starting it again", self.path)
        if self.refused is not None:
            raise TraceFileRefused(str(self.refused))
        if self._file is None:
            try:
                f = open_trace_file(self.path, self.allow_unsafe_dir)
            except TraceFileRefused as exc:
                self.refused = exc
                raise
            st = os.fstat(f.fileno())
            self._file, self._ident, self.size = f, (st.st_dev, st.st_ino), st.st_size
        return self._file

    def write(self, data: bytes) -> None:
        """Append ``data`` (whole lines, or a whole compressed member) to the OS's file.

        A write that fails part way (disk full) is cut back off, so that the file still ends
        with a whole line or member, and the next write does not continue a torn one.
        """
        with self._lock:
            f = self._open()
            fd, done = f.fileno(), 0
            try:
                view = memoryview(data)
                while done < len(data):
                    done += os.write(fd, view[done:])
            except BaseException:
                if done:
                    try:
                        os.ftruncate(fd, self.size)
                    except OSError:
                        pass
                raise
            self.size += done

    def write_line(self, line: str) -> None:
        """Append one line (its newline added here) and flush it to the OS."""
        self.write(_plain([line]))

    def close(self) -> None:
        """Close the file (a later line opens it again)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
