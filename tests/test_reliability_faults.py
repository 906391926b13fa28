"""Faults in pptrace's own machinery are contained: the engine's calls return the same results,
pptrace logs one warning per cause (not per call), and counts what it lost.

Faults: a sink that raises (an Exception, or a BaseException subclass that would kill a thread),
a sink that never returns, a full disk (``/dev/full`` as the trace file, and a tiny tmpfs when
this process may mount one), a read-only trace directory, a trace directory deleted mid-run, and
a recorder thread that is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pptrace.export.trace_file import trace_file_name
from pptrace.model.config import Config
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output
from tests.helpers_reliability import (
    IDS,
    RANK,
    SENTINEL,
    T1,
    ListSink,
    RaisingSink,
    file_sink_factory,
    make_recorder,
    read_trace_file,
    run_call,
    same_outcome,
    scenarios,
    transport,
)

CALLS = 60  # attach + extract pairs per test
FLUSH = 0.02  # a short flush interval so that each test sees many flushes


class SinkDied(BaseException):
    """A BaseException subclass: escapes ``except Exception`` and would end a thread."""


def _drive(rec: Recorder, pairs: int = CALLS, pause: float = 0.001) -> None:
    """Run attach/extract pairs plus every scenario against bare and wrapped functions, on a
    worker thread that must finish (a stalled engine call shows up as a hung worker)."""
    mod = transport()
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(pairs):
                d = {"next_token_ids": IDS}
                assert attach(d, Output({"a": T1})) is None
                assert extract(d, Observer(SENTINEL)) is SENTINEL
                assert list(d) == ["next_token_ids"]
                time.sleep(pause)
            for case in scenarios():
                bare = (mod.add_auxiliary_output_to_pp_tensors if case.direction == "attach"
                        else mod.pop_auxiliary_output_from_pp_tensors)
                fn = attach if case.direction == "attach" else extract
                same_outcome(run_call(bare, *case.build()), run_call(fn, *case.build()))
        except BaseException as exc:  # report on the test's thread
            failures.append(exc)

    worker = threading.Thread(target=work, name="engine")
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "an engine call stalled behind pptrace"
    if failures:
        raise failures[0]


def _total() -> int:
    return 2 * CALLS + len(scenarios())


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "pptrace" and r.levelno >= logging.WARNING]


def _assert_once_per_cause(rec: Recorder, caplog: pytest.LogCaptureFixture) -> None:
    """Each cause was logged exactly once, however often it happened."""
    messages = _warnings(caplog)
    for cause, count in rec.warn.counts.items():
        logged = [m for m in messages if m.startswith(f"pptrace: {cause}: ")]
        assert len(logged) == 1, (cause, count, messages)
    assert len(messages) == len(rec.warn.counts), messages


@pytest.mark.parametrize("make_exc", [lambda: OSError("sink broke"), lambda: SinkDied("gone")],
                         ids=["exception", "base-exception"])
def test_raising_sink_is_contained(make_exc: Callable[[], BaseException],
                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pptrace")
    sink = RaisingSink(make_exc)
    rec = make_recorder(Config(flush_interval=FLUSH), sink).start()
    _drive(rec)
    deadline = time.monotonic() + 20
    while sink.calls <= 4 and time.monotonic() < deadline:
        time.sleep(FLUSH)
    # The flush thread survived every raise and kept flushing.
    assert rec._thread is not None and rec._thread.is_alive()
    assert sink.calls > 4
    rec.shutdown(timeout=2.0)
    stats = rec.stats()
    assert stats.recorded == _total()
    assert stats.exported == 0 and stats.dropped == _total()  # every lost event is counted
    assert stats.export_errors >= 2
    name = type(make_exc()).__name__
    assert rec.warn.counts[f"export failed ({name})"] >= 2
    _assert_once_per_cause(rec, caplog)


def test_sink_that_never_returns_cannot_hold_the_engine_or_exit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="pptrace")
    release = threading.Event()

    class Hanging(ListSink):
        def export(self, events: Any) -> None:
            release.wait(30)

    rec = make_recorder(Config(flush_interval=FLUSH), Hanging()).start()
    try:
        _drive(rec)  # the flush thread is stuck inside export: calls still return
        started = time.monotonic()
        rec.shutdown(timeout=0.3)
        # Exit gave up instead of waiting for the sink (generous bound: a hang would be 30 s).
        assert time.monotonic() - started < 10
        assert rec.warn.counts["exit flush timed out"] == 1
        _assert_once_per_cause(rec, caplog)
    finally:
        release.set()


def test_stopped_recorder_thread_holds_then_counts_drops(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pptrace")
    sink = ListSink()
    cap = 50
    rec = make_recorder(Config(flush_interval=FLUSH, buffer_size=cap), sink).start()
    # Stop the flush thread the way a crash inside it would: it is simply gone.
    thread = rec._thread
    assert thread is not None
    rec._stop = True
    rec._wake.set()
    thread.join(5)
    assert not thread.is_alive()
    _drive(rec)
    assert rec.dropped == _total() - cap
    assert rec.warn.counts["buffer full"] == _total() - cap
    rec.shutdown(timeout=2.0)  # the exit flush still delivers what the buffer held
    assert len(sink.events) == cap
    assert sink.stats[-1].dropped == _total() - cap
    assert sink.stats[-1].recorded == _total()
    _assert_once_per_cause(rec, caplog)


# --- file sink faults ---------------------------------------------------------------------------


def _file_recorder(trace_dir: str) -> tuple[Recorder, str]:
    config = Config(trace_dir=trace_dir, flush_interval=FLUSH)
    rec = make_recorder(config, sink_factory=file_sink_factory(config))
    return rec, os.path.join(trace_dir, trace_file_name(RANK))


def _assert_lost_and_counted(rec: Recorder, caplog: pytest.LogCaptureFixture,
                             total: int | None = None) -> None:
    rec.shutdown(timeout=2.0)
    stats = rec.stats()
    total = _total() if total is None else total
    assert stats.recorded == total
    assert stats.exported + stats.dropped == total
    assert stats.dropped > 0 and stats.export_errors > 0
    assert any(c.startswith("export failed (") for c in rec.warn.counts)
    _assert_once_per_cause(rec, caplog)


def test_dev_full_as_trace_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pptrace")
    rec, path = _file_recorder(str(tmp_path))
    os.symlink("/dev/full", path)
    rec.start()
    _drive(rec)
    _assert_lost_and_counted(rec, caplog)
    assert rec.exported == 0


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@contextlib.contextmanager
def _tmpfs(where: Path, options: str) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "pptrace-test", str(where)],
                          capture_output=True, timeout=20)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=20)


@pytest.mark.skipif(not _can_mount(), reason="mounting a tiny tmpfs needs root")
def test_tiny_filesystem_fills_up(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pptrace")
    with _tmpfs(tmp_path / "fs", "size=256k,mode=0700") as fs:  # a tmpfs root is 1777
        rec, path = _file_recorder(str(fs))
        rec.start()
        # About 2.6 KB a span: 1.5 MB in flushes of some 50 KB, far more than 256 KB.
        _drive(rec, pairs=300, pause=0.001)
        _assert_lost_and_counted(rec, caplog, total=600 + len(scenarios()))
        assert rec.exported > 0  # some lines fit before the disk filled
        events, _, bad = read_trace_file(path)
        # What reached the disk is readable; at most the last line is torn.
        assert len(events) > 0 and len(bad) <= 1


def test_read_only_trace_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pptrace")
    with contextlib.ExitStack() as stack:
        if _can_mount():
            ro = stack.enter_context(_tmpfs(tmp_path / "ro", "size=64k,ro"))
        elif os.geteuid() != 0:
            ro = tmp_path / "ro"
            ro.mkdir()
            ro.chmod(0o500)
            stack.callback(ro.chmod, 0o700)
        else:
            pytest.skip("root ignores directory permissions and cannot mount here")
        rec, path = _file_recorder(str(ro / "traces"))
        rec.start()
        _drive(rec)
        _assert_lost_and_counted(rec, caplog)
        assert rec.exported == 0
        assert not os.path.exists(path)


def test_trace_directory_deleted_mid_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pptrace")
    rec, path = _file_recorder(str(tmp_path / "traces"))
    rec.start()
    _drive(rec, pairs=CALLS // 2)
    rec.flush()
    assert os.path.exists(path)
    shutil.rmtree(tmp_path / "traces")
    _drive(rec, pairs=CALLS // 2)
    rec.shutdown(timeout=2.0)
    # The events recorded after the deletion are in a new file, not in an unlinked inode.
    events, stats, bad = read_trace_file(path)
    assert not bad
    half = CALLS + len(scenarios())  # events of one _drive(pairs=CALLS // 2)
    assert rec.recorded == 2 * half
    assert len(events) >= half
    assert stats[-1].recorded == 2 * half and stats[-1].dropped == 0
    assert rec.stats().dropped == 0
    messages = _warnings(caplog)
    assert sum("was deleted" in m for m in messages) == 1, messages


# --- OTLP collector down or silent -------------------------------------------------------------


@contextlib.contextmanager
def _collector(kind: str) -> Iterator[str]:
    """An endpoint whose collector is down (nothing listens) or silent (accepts, never answers)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if kind == "down":
        sock.close()  # the port is free again: connections are refused
    else:
        sock.listen(64)  # the kernel completes handshakes; nobody ever reads or answers
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        sock.close()


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
@pytest.mark.parametrize("kind", ["down", "silent"])
def test_otlp_collector_down_or_silent(kind: str, protocol: str, caplog: pytest.LogCaptureFixture,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.WARNING, logger="pptrace")
    from pptrace.export.sinks import build_sink

    with _collector(kind) as endpoint:
        for var in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                    "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                    "OTEL_SDK_DISABLED"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        config = Config(exporters=("otlp",), flush_interval=FLUSH, exit_timeout=1.0)
        rec: Recorder | None = None

        def factory(rank: Any) -> Any:
            assert rec is not None
            return build_sink(config, rank, on_drop=rec.exporter_dropped)

        rec = make_recorder(config, sink_factory=factory).start()
        _drive(rec)
        started = time.monotonic()
        rec.shutdown()
        # Exit is bounded by the exit timeout, not by the network (generous bound for 2 cores).
        assert time.monotonic() - started < 10
    stats = rec.stats()
    assert stats.recorded == _total()
    # Every event went to the exporter and was lost there, and every loss was counted: as the
    # OTLP sink's own, not as a loss before the sinks (which a trace file would then claim).
    assert stats.sink_lost("otlp") == _total() and stats.dropped == 0, (stats, rec.warn.counts)
    assert stats.final and stats.recorded == stats.exported + stats.dropped
    assert any(c.startswith("exporter dropped spans (") for c in rec.warn.counts)
    _assert_once_per_cause(rec, caplog)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e309", "1e10"])
@pytest.mark.parametrize("var", ["PPTRACE_EXIT_TIMEOUT", "PPTRACE_FLUSH_INTERVAL"])
def test_non_finite_or_huge_seconds_are_refused(var: str, value: str) -> None:
    # An infinite exit timeout made shutdown raise OverflowError (losing the exit flush); nan
    # made it give up at once. Refuse them where they are read, with the variable's name.
    from pptrace.model.errors import ConfigError

    with pytest.raises(ConfigError, match=var):
        Config.from_env({var: value})


def test_largest_accepted_exit_timeout_still_shuts_down() -> None:
    sink = ListSink()
    config = Config.from_env({"PPTRACE_EXIT_TIMEOUT": "1e9", "PPTRACE_FLUSH_INTERVAL": "1e9"})
    rec = make_recorder(config, sink).start()
    rec.shutdown()  # idle: returns at once, and never overflows a wait
    assert sink.stats and sink.closed


def test_failing_rank_discovery_loses_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pptrace")

    def broken() -> Any:
        raise RuntimeError("rank discovery broke")

    sink = ListSink()
    rec = Recorder(Config(flush_interval=FLUSH), sink_factory=lambda rank: sink,
                   rank_provider=broken).start()
    _drive(rec)
    rec.shutdown(timeout=2.0)
    assert rec.recorded == _total() == rec.exported == len(sink.events)
    assert rec.dropped == 0 and rec.internal_errors > 0
    assert sink.stats and sink.stats[-1].rank.pid == os.getpid()
    _assert_once_per_cause(rec, caplog)


def test_sink_that_cannot_be_opened_counts_every_event(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pptrace")

    def refuse(rank: Any) -> Any:
        raise PermissionError("no trace directory for you")

    rec = make_recorder(Config(flush_interval=FLUSH), sink_factory=refuse).start()
    _drive(rec)
    rec.shutdown(timeout=2.0)
    assert rec.recorded == _total() == rec.dropped
    assert rec.warn.counts["cannot open sink"] == 1
    _assert_once_per_cause(rec, caplog)
