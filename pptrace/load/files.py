"""Reading trace files into a ``TraceBuilder``: which files a path names, and each file's format.

A path is a file, a directory (its ``*.json``, ``*.jsonl``, ``*.ndjson``, ``*.jsonl.gz`` and
``*.jsonl.zst`` files) or a glob. A file, plain or compressed (gzip or zstd, told by its first
bytes and read a chunk at a time: ``pptrace.load.compressed``), holds JSON lines (pptrace's own
files, the Collector's file exporter, Jaeger v3 API stream chunks) or one JSON document (OTLP
``TracesData``, a Jaeger v3 API response, Jaeger's JSON).
JSON lines stream one line at a time, pptrace's own through the fast path
(``pptrace.load.fast``); a single document, and a line over 16 MB, is walked span by span
(``pptrace.load.stream``). Every file is read within ``pptrace.load.limits.ReadLimits``: a line
or document over its size is passed over unread, a file stops at its line count or (compressed)
its expansion, and binary data stops it at its first NUL; each is one problem naming the file
and line, and the lines before it are kept.

    files = expand_paths(["pptrace-traces/"])
    errors = read_files(files, sizes, builder, progress)   # the files that had to be skipped
"""

from __future__ import annotations

import glob
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any, NamedTuple

from pptrace.load.builder import TraceBuilder
from pptrace.load.compressed import CompressedLines, compression_of, strip_compression
from pptrace.load.jaeger import for_each_jaeger_span
from pptrace.load.limits import LINE_ENV, LINES_ENV, ReadLimits
from pptrace.load.lines import OVERLONG, Lines
from pptrace.load.otlp import BadShape, for_each_otlp_span
from pptrace.load.stream import stream_document
from pptrace.model.errors import SchemaVersionError, TraceInputError
from pptrace.model.progress import Progress
from pptrace.model.trace import InputProblem

__all__ = ["TRACE_SUFFIXES", "Found", "Head", "error_detail", "expand_paths", "open_regular",
           "read_files"]

TRACE_SUFFIXES = (".json", ".jsonl", ".ndjson", ".jsonl.gz", ".jsonl.zst")
_LINE_SUFFIXES = (".jsonl", ".ndjson")
_PROGRESS_STEP = 1 << 20
_BIG_LINE = 16 << 20  # characters: above this a line is walked span by span
_PIECE = 1 << 20  # bytes of a plain file read at a time


class Found(NamedTuple):
    """The files some paths name, and the entries of their directories and globs left out."""

    files: list[str]
    skipped: list[InputProblem]


class Head:
    """How much of one file's lines to read first (``pptrace.load.head``), a whole line at a
    time: ``budget`` bytes, and past it on until ``ready()`` says enough is read, or ``over``
    more bytes were; ``cut`` once lines were left unread."""

    __slots__ = ("budget", "cut", "left", "over", "ready")

    def __init__(self, budget: int, over: int = 0,
                 ready: Callable[[], bool] = lambda: True) -> None:
        self.budget = self.left = budget
        self.over = over
        self.ready = ready
        self.cut = False

    @property
    def read(self) -> int:
        """Bytes of lines read so far."""
        return self.budget - self.left


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, for a message."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _regular(path: str) -> str | None:
    """None when ``path`` is a regular file (after links); else why it is not read."""
    try:
        mode = os.stat(path).st_mode  # stat never blocks, even on a FIFO
    except OSError as exc:
        if os.path.islink(path):
            return "a symbolic link to nothing"
        return f"cannot read: {exc.strerror or exc}"
    return None if stat.S_ISREG(mode) else _kind(mode)


def _skip_message(why: str, skipped: bool = True) -> str:
    head = "skipped: " if skipped else ""
    if why.startswith("cannot"):
        return head + why
    return f"{head}{why} (only regular files are read)"


def expand_paths(paths: Iterable[str], *, allow_missing: bool = False) -> Found:
    """Resolve files, directories and globs into a sorted, de-duplicated list of files.

    A directory's and a glob's entries that are not regular files (a FIFO, a device, a link to
    one) are left out and listed in ``skipped``: reading them could block forever. With
    ``allow_missing`` (``--follow``), a path that does not exist yet and a directory without
    trace files yet name no files instead of raising.
    """
    out: list[str] = []
    seen: set[str] = set()
    skipped: list[InputProblem] = []

    def add(path: str) -> None:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            out.append(path)

    def regular(candidates: Iterable[str]) -> list[str]:
        kept = []
        for f in sorted(candidates):
            why = _regular(f)
            if why is None:
                kept.append(f)
            else:
                skipped.append(InputProblem(f, None, _skip_message(why)))
        return kept

    for raw in paths:
        path = os.path.expanduser(raw)
        if os.path.isdir(path):
            before = len(skipped)
            found = regular(os.path.join(path, name) for name in os.listdir(path)
                            if name.endswith(TRACE_SUFFIXES))
            if not found and not allow_missing:
                why = f"; {skipped[before]}" if len(skipped) > before else ""
                raise TraceInputError(
                    f"no trace files ({', '.join('*' + s for s in TRACE_SUFFIXES)}) in "
                    f"directory{why}", path=raw)
            for f in found:
                add(f)
        elif os.path.exists(path):
            add(path)  # named directly: its reader says what it is (never blocking on it)
        elif glob.has_magic(path):
            before = len(skipped)
            matches = regular(glob.glob(path))
            if not matches and not allow_missing:
                why = f"; {skipped[before]}" if len(skipped) > before else ""
                raise TraceInputError(f"no file matches this pattern{why}", path=raw)
            for f in matches:
                add(f)
        elif not allow_missing:
            raise TraceInputError("no such file or directory", path=raw)
    return Found(out, skipped)


def open_regular(path: str) -> IO[bytes]:
    """Open a regular, non-empty file for reading, never blocking (TraceInputError otherwise).

    It is checked twice: ``stat`` before opening (opening a device can act on it), then
    ``fstat`` of what was opened, without blocking (``O_NONBLOCK``: a FIFO opens at once). The
    flag stays set, so a file that would block on read (a kernel file such as ``/proc/kmsg``,
    which also reports size 0 and is refused for it) cannot hang the loader.
    """
    why = _regular(path)
    if why is not None:
        raise TraceInputError(_skip_message(why, skipped=False), path=path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TraceInputError(_skip_message(_kind(st.st_mode), skipped=False), path=path)
        if st.st_size == 0:
            raise TraceInputError("empty file: no trace data", path=path, line=1)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _dispatch(doc: Any, builder: TraceBuilder) -> None:
    """Route one parsed JSON document to the reader for its format."""
    if isinstance(doc, list):
        for item in doc:
            _dispatch(item, builder)
        return
    if not isinstance(doc, dict):
        raise BadShape(f"expected a JSON object, found {type(doc).__name__}")
    if "resourceSpans" in doc or "resource_spans" in doc:
        for_each_otlp_span(doc, builder)
    elif "result" in doc:
        result = doc["result"]
        if not isinstance(result, dict):
            raise BadShape(f"'result' should be an object, found {type(result).__name__}")
        for_each_otlp_span(result, builder)
    elif "data" in doc:
        for_each_jaeger_span(doc, builder)
    elif "error" in doc:
        raise BadShape(f"the document is an error response: {str(doc['error'])[:120]}")
    elif not doc:
        return  # "{}": an empty export
    else:
        keys = ", ".join(sorted(map(str, doc))[:5])
        raise BadShape(
            "not a trace: expected 'resourceSpans' (OTLP), 'result' (Jaeger v3 API) or "
            f"'data' (Jaeger JSON), found keys {keys}"
        )


def _not_text(chunk: bytes) -> tuple[int, str] | None:
    """(1-based line, what) of the first sign that ``chunk`` is not JSON text, else None."""
    nul = chunk.find(b"\0")
    if nul >= 0:
        return chunk.count(b"\n", 0, nul) + 1, "binary data, not a JSON trace"
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(chunk) - 4:  # not just a character cut by the chunk's end
            line = chunk.count(b"\n", 0, exc.start) + 1
            return line, "not UTF-8 text: this is not a JSON trace"
    return None


def _mb(n: int) -> str:
    return f"{n / (1 << 20):g} MB"


def _stop(builder: TraceBuilder, path: str, line: int, message: str, spans: bool) -> None:
    """Binary or non-UTF-8 data from ``line`` on: a problem after lines that gave ``spans``,
    else the file's error."""
    if not spans:
        raise TraceInputError(message, path=path, line=line)
    builder.problem(f"{message}: the rest of the file skipped (the lines before it were read)",
                    line=line)


def _read_lines(path: str, lines: Lines, builder: TraceBuilder, tick: Callable[[int], None],
                first_can_switch: bool, limits: ReadLimits, head: Head | None = None
                ) -> bool | None:
    """Read JSON lines (with ``head``, only the first of them); return whether they gave
    spans, or None when the first line shows the file is one multi-line document."""
    fast = builder.fast
    count = 0
    whole = 0  # lines counted in builder.accepted (which also counts the spans they gave)
    for lineno, raw in lines:
        if head is not None:
            if head.left <= 0 and (head.left <= -head.over or head.ready()):
                head.cut = True  # a line is left: this file was not read to its end
                break
            head.left -= len(raw) if isinstance(raw, bytes) else 0
        builder.line = lineno
        if not isinstance(raw, bytes):
            if raw is OVERLONG:
                first_can_switch = False
                builder.problem(f"line longer than the {_mb(limits.line_bytes)} that pptrace "
                                f"holds in memory; skipped unread ({LINE_ENV} raises the bound)")
                continue
            _stop(builder, path, lineno, "binary data, not a JSON trace",  # BINARY
                  builder.accepted > whole)
            return builder.accepted > whole
        count += 1
        if count > limits.lines:
            _stop(builder, path, lineno, f"more than {limits.lines:,} lines in one file "
                  f"({LINES_ENV} raises the bound)", builder.accepted > whole)
            return builder.accepted > whole
        tick(len(raw))
        if fast.line(raw):  # before strip(): a line of pptrace's is megabytes, copied for nothing
            first_can_switch = False
            builder.accepted += 1
            whole += 1
            continue
        text = raw.strip()
        if not text:
            continue
        try:
            line = text.decode("utf-8")
        except UnicodeDecodeError:
            _stop(builder, path, lineno, "not UTF-8 text: this is not a JSON trace",
                  builder.accepted > whole)
            return builder.accepted > whole
        try:
            if len(line) > _BIG_LINE and line[:1] == "{":
                # One huge document on one line: walk it span by span, not as one tree.
                before = builder.file_problems
                stream_document(line, builder)
                first_can_switch = False
                if builder.file_problems == before:
                    builder.accepted += 1
                    whole += 1
                continue
            doc = json.loads(line)
        except BadShape as exc:
            builder.problem(f"{exc}; line skipped")
            continue
        except RecursionError:
            if first_can_switch:
                return None
            builder.problem("JSON nested too deeply; line skipped")
            continue
        except ValueError as exc:
            if first_can_switch:
                return None
            if not raw.endswith(b"\n"):
                builder.problem("truncated last line skipped (the writer stopped mid-line?)")
            else:
                msg = getattr(exc, "msg", str(exc))
                builder.problem(f"line is not JSON ({msg}); skipped")
            continue
        first_can_switch = False
        try:
            before = builder.file_problems
            _dispatch(doc, builder)
            if builder.file_problems == before:
                builder.accepted += 1
                whole += 1
        except (BadShape, RecursionError) as exc:  # Python >= 3.12 parses deeper than it recurses
            builder.problem(f"{exc}; line skipped")
    return builder.accepted > whole


def _too_big_document(path: str, limits: ReadLimits) -> TraceInputError:
    return TraceInputError(
        f"one JSON document larger than the {_mb(limits.line_bytes)} that pptrace holds in "
        f"memory ({LINE_ENV} raises the bound; or write it as JSON lines)", path=path)


def _read_document(path: str, data: bytes, builder: TraceBuilder) -> None:
    """Read one JSON document span by span (``pptrace.load.stream``), in about twice its size."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TraceInputError("not UTF-8 text: this is not a JSON trace", path=path) from None
    del data
    builder.line = None
    try:
        if not stream_document(text, builder):
            _dispatch(json.loads(text), builder)
    except json.JSONDecodeError as exc:
        if not builder.accepted:
            raise TraceInputError(
                f"not valid JSON: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno
            ) from None
        # A document cut short (its writer stopped): keep the spans before the damage.
        builder.problem(f"not valid JSON from here on ({exc.msg}); the spans before it were read",
                        line=exc.lineno)
        return
    except RecursionError:
        raise TraceInputError("not a trace: JSON nested too deeply", path=path) from None
    except BadShape as exc:
        raise TraceInputError(str(exc), path=path) from None
    builder.accepted += 1


def _check_text(path: str, head: bytes) -> None:
    """Refuse a file whose first line already shows it is not JSON text; a later line is left
    to the line reader (the lines before it are kept)."""
    bad = _not_text(head)
    if bad is not None and bad[0] == 1:
        raise TraceInputError(bad[1], path=path, line=bad[0])


def _read_compressed(path: str, f: IO[bytes], kind: str, builder: TraceBuilder,
                     tick: Callable[[int], None], limits: ReadLimits, part: Head | None) -> None:
    """Read a compressed file's lines (or, not being lines, its one document) as a plain
    file's; a cut, damaged or over-expanding end is one problem."""
    as_lines = strip_compression(path).endswith(_LINE_SUFFIXES)
    reader = CompressedLines(f, kind, path, tick, first=lambda head: _check_text(path, head),
                             limits=limits)
    lines = reader.lines()
    spans = _read_lines(path, lines, builder, lambda n: None, not as_lines, limits, part)
    if spans is not None:
        if reader.capped and not spans:
            raise TraceInputError(reader.problem or "", path=path, line=lines.next_line)
        if reader.problem is not None:
            builder.line = lines.next_line
            builder.problem(reader.problem)
        return
    f.seek(0)
    whole = CompressedLines(f, kind, path, limits=limits)
    parts: list[bytes] = []
    size = 0
    for piece in whole.pieces():
        size += len(piece)
        if size > limits.line_bytes:
            raise _too_big_document(path, limits)
        parts.append(piece)
    if whole.problem is not None:
        raise TraceInputError(whole.problem, path=path)
    data = b"".join(parts)
    del parts
    _read_document(path, data, builder)


def _plain_pieces(f: IO[bytes]) -> Iterator[bytes]:
    while True:
        piece = f.read(_PIECE)
        if not piece:  # b"" at the end; None: a read that would block (not a regular file)
            return
        yield piece


def _read_file(path: str, builder: TraceBuilder, tick: Callable[[int], None],
               limits: ReadLimits, part: Head | None) -> None:
    builder.start_file(path)
    try:
        with open_regular(path) as f:
            head = f.read(1 << 16) or b""  # (None: a read that would block)
            if not head.strip():
                raise TraceInputError("empty file: no trace data", path=path, line=1)
            kind = compression_of(head)
            f.seek(0)
            if kind is not None:
                _read_compressed(path, f, kind, builder, tick, limits, part)
            else:
                _check_text(path, head)
                as_lines = path.endswith(_LINE_SUFFIXES)
                lines = Lines(_plain_pieces(f), limits.line_bytes)
                if _read_lines(path, lines, builder, tick, not as_lines, limits, part) is None:
                    if os.fstat(f.fileno()).st_size > limits.line_bytes:
                        raise _too_big_document(path, limits)
                    f.seek(0)
                    data = f.read(limits.line_bytes + 1) or b""
                    tick(len(data))
                    _read_document(path, data, builder)
    except OSError as exc:
        raise TraceInputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    builder.end_file()
    if builder.file_problems and not builder.accepted:
        first = next(p for p in builder.problems if p.source == path)
        raise TraceInputError(first.message, path=path, line=first.line)


class _Ticker:
    """Counts bytes read in one file and reports progress every megabyte."""

    def __init__(self, progress: Progress | None, base: int, total: int, path: str) -> None:
        self.progress, self.base, self.total, self.path = progress, base, total, path
        self.pending = self.reported = 0

    def __call__(self, n: int) -> None:
        self.pending += n
        if self.progress is not None and self.pending - self.reported >= _PROGRESS_STEP:
            self.reported = self.pending
            self.progress(min(self.total, self.base + self.pending), self.total, self.path)


def read_files(files: Sequence[str], sizes: dict[str, int], builder: TraceBuilder,
               progress: Progress | None, base: int = 0,
               heads: Mapping[str, Head] | None = None) -> list[TraceInputError]:
    """Read files in order into ``builder``; return the errors of files that were skipped.

    ``heads``: read only so much of each file's lines (a whole-document file is read whole).
    A ``SchemaVersionError`` (a span this pptrace cannot read) is raised at once.
    """
    limits = ReadLimits.from_env()
    total = base + sum(sizes[f] for f in files)
    done = base
    errors: list[TraceInputError] = []
    for path in files:
        tick = _Ticker(progress, done, total, path)
        kept_problems = len(builder.problems)
        try:
            _read_file(path, builder, tick, limits, heads.get(path) if heads else None)
        except SchemaVersionError:
            raise
        except TraceInputError as exc:
            # Roll back this file's problems: the whole file becomes one problem (or the error).
            del builder.problems[kept_problems:]
            errors.append(exc)
        done += sizes[path]
        if progress is not None:
            progress(done, total, path)
    return errors


def error_detail(exc: TraceInputError) -> str:
    """The error's message without its ``path:line:`` prefix."""
    text = str(exc)
    if exc.path is not None:
        prefix = f"{exc.path}:{exc.line}: " if exc.line is not None else f"{exc.path}: "
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text
