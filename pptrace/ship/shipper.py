"""Ship a trace directory's files to an OTLP collector, from a process of its own.

The engine's process only writes its trace file; this process tails every trace file of the
directory (segments and compressed files included: ``pptrace.ship.tail``), re-encodes each line
as version 1 spans (``pptrace.ship.reencode``) and posts them, as OTLP/JSON, protobuf or gRPC
requests (``pptrace.ship.posters``), at most ``BATCH_LINES`` lines (512 spans) a request, with
the in-process path's rules:
a request the collector never received (no connection, or 429/502/503/504) is posted again after
a backoff (1 s doubling to 30 s), and the file is the queue meanwhile, so a down collector costs
the files nothing; a request it may have received (any other failure) is never sent again, and
its events are counted lost. Positions and counts live in the state file (``pptrace.ship.state``),
written before each post and after it, so a restarted shipper neither resends nor skips.

It ends when the run has: every process whose file it found has written its final stats span or
is gone (its pid no longer runs), every file is read to its end, the ``watch`` process (``pptrace
run``'s command) has exited, and no new file came for ``linger`` seconds. Once the run has ended,
a collector that takes no request for ``drain`` seconds ends it: what is left is counted lost
(one that takes them gets the time it needs: the files are finite).

    summary = Shipper(trace_dir, make_poster()).run()
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pptrace.export.otlp_json import BATCH_LINES, next_backoff
from pptrace.export.ship_launch import STATE_NAME
from pptrace.ship.posters import Sender
from pptrace.ship.reencode import Reencoded, Reencoder
from pptrace.ship.state import FileState, ShipState
from pptrace.ship.tail import Damaged, Position, read_lines

__all__ = ["NICENESS", "TRACE_NAME", "Shipper", "keep_freed_memory", "lower_priority",
           "pid_alive"]

#: A trace file (or segment) of a process: ``pptrace-rank3-pid42[.000007].otlp.jsonl[.gz]``.
TRACE_NAME = re.compile(r"(pptrace-rank\w+?-pid(\d+))(?:\.\d{6})?\.otlp\.jsonl(?:\.gz|\.zst)?")
#: Seconds a shipper with nothing to watch waits for a first trace file.
FIRST_FILE_WAIT = 30.0
#: How much lower than its starter's the shipper's CPU priority is (``nice``).
NICENESS = 10
#: Blocks up to this size come from the heap, and this much free memory stays at its top
#: (``keep_freed_memory``): a request's lines and body are a few MB at most.
_HEAP_BLOCKS, _HEAP_KEPT = 16 << 20, 64 << 20


def lower_priority() -> None:
    """Give the engine's processes the CPU first (``NICENESS``).

    The files are the queue: a shipper that waits for a core only lags behind the run (and a
    collector that takes its requests gets all the time it needs at the end), while an engine
    that waits for one loses its work, and its recorder may shed events past its flush deadline
    (measured on 2 cores: ``docs/otlp-shipping.md``). Where Linux groups a session's processes
    for the scheduler (``/proc/sys/kernel/sched_autogroup_enabled``), a process's nice value
    weighs only against its own session's: the shipper started by ``ensure_shipper`` leads a
    session of its own, so its session's group is lowered too (``/proc/self/autogroup``),
    never a session it merely joined (a user's shell).
    """
    try:
        os.nice(NICENESS)
    except (OSError, AttributeError):  # not permitted, or no nice here: the same priority
        pass
    try:
        own = os.getsid(0) == os.getpid()  # the started shipper's session: its group its own
    except (OSError, AttributeError):
        own = False
    if own:
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(NICENESS))
        except OSError:  # no autogroups here (or not permitted): the nice value is all
            pass


def keep_freed_memory() -> None:
    """Let the C allocator reuse the memory of one request for the next (glibc's ``mallopt``).

    Each request's lines and body are blocks of 0.1 to 2 MB. glibc maps such blocks fresh from
    the kernel and unmaps them when freed (or trims the heap they were in), so every one costs
    a page fault per 4 kB as it is written. With these thresholds the heap keeps them for the
    next: ``pptrace ship`` over ``http/json`` of ``benchmarks/bench_ship.py``'s trace file
    (42,004 events) took 10,590 minor faults against 38,974, and 1.00-1.34 s of CPU against
    1.27-1.47 (three runs each, alternating, load 2.5-3.7).
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): the allocator's own ways
        return
    mallopt(-3, _HEAP_BLOCKS)  # M_MMAP_THRESHOLD
    mallopt(-1, _HEAP_KEPT)  # M_TRIM_THRESHOLD


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs (on this node); a zombie (exited, not yet reaped
    by its parent: this shipper's own parent, under ``pptrace run``) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it runs, as another user
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:  # no /proc here: the signal's answer stands
        return True
    # "pid (comm) S ...": the state follows the last ")" (a command name may hold one).
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


@dataclass(slots=True)
class _Post:
    lines: list[str | bytes]
    end: Position
    events: int
    messages: int
    stats: int
    skipped: int
    final: bool


class Shipper:
    """Tail a trace directory's files and post their spans (see the module docstring)."""

    def __init__(self, trace_dir: str, poster: Sender, watch: int | None = None,
                 drain: float = 10.0, linger: float = 1.0, poll: float = 0.2,
                 alive: Callable[[int], bool] = pid_alive) -> None:
        self.dir = trace_dir
        self.poster = poster
        self.watch = watch
        self.drain = drain
        self.linger = linger
        self.poll = poll
        self.alive = alive
        self.state_path = os.path.join(trace_dir, STATE_NAME)
        self.state = ShipState.load(self.state_path)
        # A poster that sends protobuf takes lines written as protobuf from the templates.
        self.reencoder = Reencoder(protobuf=poster.protobuf)
        self._stop = threading.Event()
        self._ended_at: float | None = None  # when the run was first seen over
        self._delivered_at = time.monotonic()  # the last request the collector took
        self._last_change = time.monotonic()
        self._backoff = 0.0
        self._last_failure = ""
        self._sizes: dict[str, int] = {}

    def stop(self) -> None:
        """End soon (a signal): the state is saved, a restart goes on from it."""
        self._stop.set()

    # --- the loop -----------------------------------------------------------------------------

    def run(self) -> ShipState:
        """Ship until the run is over and drained (or ``stop``); the final state."""
        self.state.endpoint = self.poster.target.url
        self.state.pid = os.getpid()
        self.state.running = True
        self._recover()
        self._save()
        started = time.monotonic()
        while not self._stop.is_set():
            progressed = self._pass()
            if self._over(started):
                if self._ended_at is None:
                    self._ended_at = time.monotonic()
                if self._all_read() and time.monotonic() - self._last_change >= self.linger:
                    break
                if self._drained():
                    self._give_up(self._last_failure or "drain timeout")
                    break
            else:
                self._ended_at = None
            if not progressed:
                self._stop.wait(self.poll)
        self.state.running = False
        self._save()
        return self.state

    def _save(self) -> None:
        try:
            self.state.save(self.state_path)
        except OSError as exc:
            print(f"pptrace: OTLP shipper cannot write {self.state_path}: {exc.strerror}",
                  file=sys.stderr)

    def _recover(self) -> None:
        """Count a post an earlier shipper left in flight (the collector may have it)."""
        for fs in self.state.files.values():
            if fs.pending is not None:
                offset, lines, events, messages = fs.pending
                fs.lose(events, messages, "shipper stopped during a post")
                fs.offset, fs.lines, fs.pending = offset, lines, None

    def _names(self) -> list[str]:
        try:
            names = os.listdir(self.dir)
        except OSError:
            return []
        return sorted(n for n in names if TRACE_NAME.fullmatch(n))

    def _pass(self) -> bool:
        """One request for each file that has something to ship; whether any did."""
        progressed = False
        names = self._names()
        for name in names:
            if name not in self.state.files:
                self.state.files[name] = FileState()
                self._last_change = time.monotonic()
        for name, fs in self.state.files.items():
            if self._stop.is_set():
                break
            if fs.damaged or fs.gone:
                continue
            if name not in names:
                self._vanished(name, fs)
                continue
            post = self._next(name, fs)
            if post is not None:
                self._ship(name, fs, post)
                progressed = True
                self._last_change = time.monotonic()
        return progressed

    def _vanished(self, name: str, fs: FileState) -> None:
        """A file deleted (the oldest segment, by rotation): gone, counted when unread."""
        fs.gone = True
        if fs.offset < self._sizes.get(name, 1):
            fs.causes["segments deleted before shipped"] = fs.causes.get(
                "segments deleted before shipped", 0) + 1
        self._save()

    def _next(self, name: str, fs: FileState, want: int = BATCH_LINES) -> _Post | None:
        """The next request's lines from ``name``, up to ``BATCH_LINES`` lines."""
        path = os.path.join(self.dir, name)
        try:
            st = os.stat(path)
            if fs.inode and st.st_ino != fs.inode:  # started again under its name
                fs.offset, fs.lines = 0, 0
            fs.inode = st.st_ino
            self._sizes[name] = st.st_size
            if st.st_size <= fs.offset and fs.lines == 0:
                return None
            taken = read_lines(path, Position(fs.offset, fs.lines), want)
        except FileNotFoundError:
            return None  # the next pass finds it gone
        except (OSError, Damaged) as exc:
            fs.damaged = str(exc)
            self._save()
            return None
        if not taken:
            return None
        post = _Post([], Position(fs.offset, fs.lines), 0, 0, 0, 0, False)
        for text, after in taken:
            try:
                got = self.reencoder.line(text)
            except ValueError:  # a line that is no JSON: its spans are not known
                got = Reencoded(skipped=1)
            if post.lines and len(post.lines) + len(got.lines) > BATCH_LINES:
                break
            post.lines += got.lines
            post.end = after
            post.events += got.events
            post.messages += got.messages
            post.stats += got.stats
            post.skipped += got.skipped
            post.final = post.final or got.final
        return post

    def _ship(self, name: str, fs: FileState, post: _Post) -> None:
        """Post one request (retrying what never arrived); move the position past it."""
        if post.lines:
            fs.pending = [post.end.offset, post.end.lines, post.events, post.messages]
            self._save()
        outcome = ""
        for i in range(0, len(post.lines), BATCH_LINES):  # one request unless a line was huge
            got = self._post(post.lines[i:i + BATCH_LINES], fs, post)
            if got is None:
                return  # stopped while the collector was unreachable: nothing was taken
            outcome = got
            if outcome:
                break
        if outcome:
            fs.lose(post.events, post.messages, outcome)
        else:
            fs.events_sent += post.events
            fs.messages_sent += post.messages
            fs.stats_sent += post.stats
        fs.skipped += post.skipped
        fs.final = fs.final or post.final
        fs.offset, fs.lines, fs.pending = post.end.offset, post.end.lines, None
        self._save()

    def _post(self, lines: list[str | bytes], fs: FileState, post: _Post) -> str | None:
        """"" when delivered, the cause when lost, None when stopped before it got through."""
        while True:
            if self._drained():
                return self._last_failure or "drain timeout"
            outcome = self.poster.post(lines)
            if not outcome:
                self._backoff = 0.0
                self._delivered_at = time.monotonic()
                return ""
            self._last_failure = outcome.removeprefix("retry: ")
            if not outcome.startswith("retry: "):
                self._backoff = next_backoff(self._backoff)
                return self._last_failure
            # Never received: it stays in the file; not pending while nothing is in flight.
            fs.pending = None
            self._save()
            self._backoff = next_backoff(self._backoff)
            wait = self._backoff
            if self._ended_at is not None:
                since = max(self._ended_at, self._delivered_at)
                wait = min(wait, max(0.0, since + self.drain - time.monotonic()))
            if self._stop.wait(wait):
                return None
            if self._over(0.0) and self._ended_at is None:
                self._ended_at = time.monotonic()
            fs.pending = [post.end.offset, post.end.lines, post.events, post.messages]
            self._save()

    # --- when the run is over -----------------------------------------------------------------

    def _processes(self) -> dict[str, tuple[int, bool]]:
        """Each process's pid and whether it said its last word (a final stats span)."""
        out: dict[str, tuple[int, bool]] = {}
        for name, fs in self.state.files.items():
            m = TRACE_NAME.fullmatch(name)
            if m is None:
                continue
            pid, final = out.get(m.group(1), (int(m.group(2)), False))
            out[m.group(1)] = (pid, final or fs.final)
        return out

    def _over(self, started: float) -> bool:
        """Whether the run has ended: its processes finished or gone, the watched one too."""
        if self.watch is not None and self.alive(self.watch):
            return False
        procs = self._processes()
        if not procs and self.watch is None and time.monotonic() - started < FIRST_FILE_WAIT:
            return False
        return all(final or not self.alive(pid) for pid, final in procs.values())

    def _drained(self) -> bool:
        """Whether the drain time is over: ``drain`` seconds since the run ended without the
        collector taking a request (a collector that takes them gets all the time it needs)."""
        if self._ended_at is None:
            return False
        return time.monotonic() - max(self._ended_at, self._delivered_at) > self.drain

    def _all_read(self) -> bool:
        for name, fs in self.state.files.items():
            if fs.damaged or fs.gone:
                continue
            size = self._sizes.get(name)
            if size is None or fs.offset < size or fs.lines:
                return False
        return True

    def _give_up(self, cause: str) -> None:
        """Count what is left in every file as lost (the drain time is over)."""
        for name, fs in self.state.files.items():
            if fs.damaged or fs.gone:
                continue
            while True:
                post = self._next(name, fs, want=64)
                if post is None:
                    break
                fs.lose(post.events, post.messages, cause)
                fs.skipped += post.skipped
                fs.offset, fs.lines, fs.pending = post.end.offset, post.end.lines, None
        self._save()


def install_signals(shipper: Shipper) -> None:
    """SIGTERM and SIGINT stop the shipper cleanly (its state saved, a restart goes on)."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: shipper.stop())
