"""OTLP shipped from the trace files (``pptrace.ship``): the engine's process writes its file and
nothing else, and the shipper, a process of its own, delivers each event once, over each protocol
it speaks (``http/json``, ``http/protobuf``, ``grpc``).

What keeps the engine's cost down is kept here, never a timing (``benchmarks/
bench_engine_cost.py`` prints those): with OTLP on, the traced process builds no SDK span,
holds no OTLP sink and opens no connection; the spans reach the project's real receiver
(``tests/otlp_receiver.py``: every JSON body parsed strictly into the official protobuf
request; protobuf bodies and gRPC calls parsed as they come) from another pid, once each, in
bounded requests, across a shipper restart and a collector down then up, with a down collector
counted and the files untouched.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest
import requests
import urllib3

import pptrace
from pptrace.export.file_sink import SPANS_PER_LINE
from pptrace.export.otlp_json import BATCH_LINES, Poster, Target
from pptrace.export.ship_launch import STATE_NAME, shipper_running, wait_for_shipper
from pptrace.export.sinks import build_sink
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.records import RankInfo
from pptrace.record.engine import (
    add_auxiliary_output_to_pp_tensors,
    pop_auxiliary_output_from_pp_tensors,
)
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from pptrace.ship.posters import Sender, make_poster
from pptrace.ship.shipper import NICENESS, Shipper
from pptrace.ship.state import ShipState
from tests.doubles import Observer, Output
from tests.otlp_receiver import Receiver

REPO = Path(__file__).resolve().parent.parent


def _keys(rx: Receiver) -> list[tuple[str, int]]:
    return [(name, attrs[schema.SEQ]) for _, attrs, name in rx.spans()
            if name in (schema.SPAN_ATTACH, schema.SPAN_EXTRACT)]


def _write_trace(directory: Path, pairs: int, pid: int = 4242, **cfg: Any) -> int:
    """A finished trace file of ``pairs`` attach+extract pairs (files only); its event count."""
    config = Config(trace_dir=str(directory), flush_interval=3600, **cfg)
    rank = RankInfo(rank=0, world_size=1, pid=pid)
    rec = Recorder(config, sink_factory=lambda r: build_sink(config, r),
                   rank_provider=lambda: (rank, True))
    rec.start()
    attach, extract = wrap_transport(add_auxiliary_output_to_pp_tensors,
                                     pop_auxiliary_output_from_pp_tensors, rec)
    for i in range(pairs):
        tensors: dict[str, object] = {"i": i}
        attach(tensors, Output(2))
        extract(tensors, Observer())
        if i % 500 == 499:
            rec.request_dump()  # several flushes: several lines and writes
    rec.shutdown()
    return rec.stats().exported


#: The receiver's protocols the shipper speaks (``tests.otlp_receiver.Receiver``).
SHIPPED = ["json", "http", "grpc"]


def _ship_process(directory: Path, rx: Receiver, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint,
           "OTEL_EXPORTER_OTLP_PROTOCOL": rx.env_protocol, "PYTHONPATH": str(REPO)}
    env.pop("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", None)
    return subprocess.Popen([sys.executable, "-m", "pptrace", "ship", str(directory), *extra],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _json_bodies_only_over_json(rx: Receiver) -> None:
    """The collector got JSON bodies over http/json, protobuf ones (or gRPC) otherwise."""
    assert rx.requests
    assert rx.json_requests == (len(rx.requests) if rx.protocol == "json" else 0)


@pytest.mark.parametrize("protocol", SHIPPED)
def test_the_engine_process_builds_no_span_holds_no_otlp_sink_and_connects_nowhere(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, protocol: str) -> None:
    """A user who only points OTEL_EXPORTER_OTLP_ENDPOINT (and the protocol) at a collector:
    every event arrives, posted by another process."""
    from opentelemetry.sdk import trace as sdk_trace

    from pptrace.activation import startup
    from tests.helpers_core import real_module

    module = real_module()
    started: list[str] = []
    connects: list[Any] = []
    real_start, real_connect = sdk_trace.Tracer.start_span, socket.socket.connect
    monkeypatch.setattr(sdk_trace.Tracer, "start_span",
                        lambda self, name, *a, **k: started.append(name) or real_start(
                            self, name, *a, **k))
    monkeypatch.setattr(socket.socket, "connect",
                        lambda self, addr: connects.append(addr) or real_connect(self, addr))
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    with Receiver(protocol) as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        if protocol != "json":  # http/json is the default: the user names no protocol
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", rx.env_protocol)
        rec = pptrace.instrument(Config(exporters=("file", "otlp"), trace_dir=str(tmp_path),
                                        flush_interval=0.05))
        try:
            for _ in range(50):
                tensors: dict[str, object] = {}
                module.add_auxiliary_output_to_pp_tensors(tensors, Output(1))
                module.pop_auxiliary_output_from_pp_tensors(tensors, Observer())
            state = startup._state
            assert state is not None and state.processor is None and rec is not None
            deadline = time.monotonic() + 30
            while getattr(rec._sink, "_sink", None) is None and time.monotonic() < deadline:
                time.sleep(0.01)  # the recorder opens its sink at its first flush
            real = rec._sink._sink  # type: ignore[union-attr]
            assert real.files is not None and real.otlp is None
        finally:
            pptrace.uninstrument()
        connects_while_recording = list(connects)
        assert wait_for_shipper(str(tmp_path), 60)
        keys = _keys(rx)
        _json_bodies_only_over_json(rx)
    assert rec is not None
    stats = rec.stats()
    assert started == [] and connects_while_recording == []
    assert stats.sink_dropped == ()  # no OTLP counts it does not have
    assert len(keys) == len(set(keys)) == stats.recorded == 100
    shipped = ShipState.load(str(tmp_path / STATE_NAME))
    assert shipped.pid not in (0, os.getpid())
    assert shipped.totals()["events_sent"] == 100 and shipped.totals()["events_lost"] == 0


class _Session:
    """Answers the test scripts: an exception to raise or a status code, then 200."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.posts: list[bytes] = []

    def post(self, url: str, data: bytes, **_: Any) -> Any:
        self.posts.append(data)
        answer = self.answers.pop(0) if self.answers else 200
        if isinstance(answer, BaseException):
            raise answer
        return type("Response", (), {"status_code": answer})()


def _refused() -> requests.exceptions.ConnectionError:
    reason = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    return requests.exceptions.ConnectionError(
        urllib3.exceptions.MaxRetryError(None, "/v1/traces", reason))  # type: ignore[arg-type]


def _shipper(directory: Path, session: _Session) -> Shipper:
    return Shipper(str(directory), Poster(Target("http://127.0.0.1:9/v1/traces"), session),
                   drain=30.0, linger=0.0, poll=0.01, alive=lambda pid: False)


def test_batches_are_bounded_and_what_never_arrived_is_posted_again_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pptrace.ship.shipper as shipper_module

    monkeypatch.setattr(shipper_module, "next_backoff", lambda b: 0.01)
    events = _write_trace(tmp_path, 1500)
    session = _Session([_refused(), 503])
    state = _shipper(tmp_path, session).run()
    sizes = [body.count(b'"spanId"') for body in session.posts]
    t = state.totals()
    assert t["events_sent"] == events == 3000 and t["events_lost"] == 0
    assert max(sizes) <= BATCH_LINES * SPANS_PER_LINE
    # The first request was refused, then answered 503: the same body three times, then on.
    assert session.posts[0] == session.posts[1] == session.posts[2] != session.posts[3]


def test_a_batch_the_collector_may_have_got_is_never_sent_again_and_counted_lost(
        tmp_path: Path) -> None:
    _write_trace(tmp_path, 100)
    session = _Session([requests.exceptions.ReadTimeout("read timed out")])
    state = _shipper(tmp_path, session).run()
    t = state.totals()
    assert len(set(session.posts)) == len(session.posts)  # nothing sent twice
    assert t["events_lost"] + t["events_sent"] == 200 and t["events_lost"] > 0
    assert t["causes"] == {"export raised ReadTimeout": t["events_lost"]}


_PRIORITY = ("from pptrace.ship.shipper import lower_priority; lower_priority(); import os; "
             "print(os.getpriority(os.PRIO_PROCESS, 0)); "
             "print(open('/proc/self/autogroup').read())")


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="no autogroups here")
def test_the_shipper_in_a_session_of_its_own_lowers_its_session_group_too() -> None:
    """Linux's autogroups weigh a nice value against the process's own session only: the
    shipper ``ensure_shipper`` starts leads a session of its own, so nice alone would leave it
    the engine's equal; its session's group is lowered as well."""
    out = subprocess.run([sys.executable, "-c", _PRIORITY], capture_output=True, text=True,
                         check=True, start_new_session=True, env={**os.environ,
                         "PYTHONPATH": str(REPO)}).stdout.split("\n")
    assert int(out[0]) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICENESS)
    assert out[1].endswith(f" nice {NICENESS}")


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="no autogroups here")
def test_a_shipper_in_its_starters_session_leaves_that_session_group_alone() -> None:
    """``pptrace ship DIR`` typed in a shell shares the shell's group: lowering it would lower
    the shell and all it runs, so only the shipper's own nice value changes. (The "shell" is a
    session made for the test: were the group lowered, it is not the one pytest runs in.)"""
    shell = ['"$1" -c "$2"; cat /proc/self/autogroup', "sh", sys.executable, _PRIORITY]
    out = subprocess.run(["sh", "-c", *shell], capture_output=True, text=True, check=True,
                         start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                         ).stdout.split("\n")
    assert int(out[0]) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICENESS)
    assert out[1].endswith(" nice 0") and out[3].endswith(" nice 0")  # the shell's group


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("protocol", SHIPPED)
def test_a_shipper_restarted_mid_run_neither_loses_nor_duplicates(tmp_path: Path, how: str,
                                                                  protocol: str) -> None:
    events = _write_trace(tmp_path, 4000, compress="gzip")
    with Receiver(protocol) as rx:
        first = _ship_process(tmp_path, rx)
        deadline = time.monotonic() + 120
        while len(rx.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        # It yields the CPU to the engine's processes (nice), up to the ceiling of 19.
        assert os.getpriority(os.PRIO_PROCESS, first.pid) == min(
            19, os.getpriority(os.PRIO_PROCESS, 0) + NICENESS)
        first.send_signal(getattr(signal, how))
        first.communicate(timeout=60)
        assert len(_keys(rx)) < events  # it was stopped mid-way
        second = _ship_process(tmp_path, rx)
        _, err = second.communicate(timeout=240)
        keys = _keys(rx)
        _json_bodies_only_over_json(rx)
    t = ShipState.load(str(tmp_path / STATE_NAME)).totals()
    assert len(keys) == len(set(keys))  # never twice
    if how == "SIGTERM":  # a clean stop: nothing in flight, nothing lost
        assert len(keys) == t["events_sent"] == events == 8000 and t["events_lost"] == 0, err
    else:  # killed during a post: that request may have arrived; counted lost, never resent
        assert t["events_sent"] + t["events_lost"] == events
        assert set(t["causes"]) <= {"shipper stopped during a post"}
        # What arrived is what was confirmed, plus at most the request in flight at the kill.
        assert t["events_sent"] <= len(keys) <= t["events_sent"] + t["events_lost"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_down_collector_costs_the_files_nothing_and_is_counted(tmp_path: Path) -> None:
    events = _write_trace(tmp_path, 300)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.jsonl")}
    with Receiver("json", "down") as rx:
        proc = _ship_process(tmp_path, rx, "--drain", "1")
        _, err = proc.communicate(timeout=100)
    after = {p.name: p.read_bytes() for p in tmp_path.glob("*.jsonl")}
    t = ShipState.load(str(tmp_path / STATE_NAME)).totals()
    assert before == after and proc.returncode == 0
    assert t["events_sent"] == 0 and t["events_lost"] == events == 600
    assert t["causes"] == {"collector unreachable": 600}
    assert "600 events and 0 messages lost (600 collector unreachable)" in err


_RANK = """
import sys, time
import pptrace
from pptrace.model.config import Config
from tests.doubles import Observer, Output
pptrace.instrument(Config(exporters=("file", "otlp"), trace_dir=sys.argv[1],
                          flush_interval=0.2), targets="pptrace.record.engine")
from pptrace.record import engine
n = 0
while True:
    t = {}
    engine.add_auxiliary_output_to_pp_tensors(t, Output(2))
    engine.pop_auxiliary_output_from_pp_tensors(t, Observer())
    n += 1
    if n == 200:
        print("ready", flush=True)
    time.sleep(0.001)
"""


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_sigkilled_rank_loses_in_the_collector_only_what_its_file_lacks(
        tmp_path: Path) -> None:
    """The collector gets exactly the events the killed rank's file holds (the file loses at
    most its last flush interval: tests/test_reliability_faults.py)."""
    from pptrace.load.loader import load_paths

    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    traces = tmp_path / "traces"
    with Receiver("json") as rx:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint,
               "PYTHONPATH": str(REPO)}
        env.pop("OTEL_EXPORTER_OTLP_PROTOCOL", None)
        rank = subprocess.Popen([sys.executable, str(script), str(traces)], env=env,
                                stdout=subprocess.PIPE, text=True)
        assert rank.stdout is not None and rank.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # a few flushes reach the file
        rank.send_signal(signal.SIGKILL)
        rank.communicate(timeout=30)
        assert wait_for_shipper(str(traces), 120)
        keys = sorted(_keys(rx))
    trace = load_paths([str(traces)])
    in_file = sorted((schema.span_name(e.direction), e.seq)
                     for p in trace.processes for e in p.events)
    assert keys == in_file and len(keys) > 0
    assert not shipper_running(str(traces))


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize("protocol", SHIPPED)
def test_pptrace_run_with_an_endpoint_needs_no_other_step(tmp_path: Path, protocol: str) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        "from pptrace.record import engine as e\n"
        "from tests.doubles import Observer, Output\n"
        "for _ in range(25):\n"
        "    t = {}\n"
        "    e.add_auxiliary_output_to_pp_tensors(t, Output(2))\n"
        "    e.pop_auxiliary_output_from_pp_tensors(t, Observer())\n")
    traces = tmp_path / "traces"
    with Receiver(protocol) as rx:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        for key in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "PPTRACE_EXPORT"):
            env.pop(key, None)
        named = [] if protocol == "json" else ["--protocol", rx.env_protocol]
        proc = subprocess.run(
            [sys.executable, "-m", "pptrace", "run", "--dir", str(traces), "--endpoint",
             rx.endpoint, *named, "--target", "pptrace.record.engine", "--native-build", "off",
             "--", sys.executable, str(script)],
            env=env, capture_output=True, text=True, timeout=150)
        assert proc.returncode == 0, proc.stderr
        assert wait_for_shipper(str(traces), 120)
        keys = _keys(rx)
        _json_bodies_only_over_json(rx)
    assert len(keys) == len(set(keys)) == 50


class _Watched:
    """A real poster whose outcomes are kept (the test starts the collector on the first
    "never received")."""

    def __init__(self, poster: Sender) -> None:
        self.poster = poster
        self.outcomes: list[str] = []
        self.refused = threading.Event()

    @property
    def target(self) -> Any:
        return self.poster.target

    @property
    def protobuf(self) -> bool:
        return self.poster.protobuf

    def post(self, lines: Sequence[str | bytes]) -> str:
        outcome = self.poster.post(lines)
        self.outcomes.append(outcome)
        if outcome.startswith("retry: "):
            self.refused.set()
        return outcome


@pytest.mark.timeout(120)
@pytest.mark.parametrize("protocol", SHIPPED)
def test_a_collector_down_then_up_gets_every_event_once(tmp_path: Path, protocol: str) -> None:
    events = _write_trace(tmp_path, 1200)
    down = Receiver(protocol, "down").start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": down.endpoint,
           "OTEL_EXPORTER_OTLP_PROTOCOL": down.env_protocol}
    poster = _Watched(make_poster(env))
    shipper = Shipper(str(tmp_path), cast(Sender, poster), drain=60.0, linger=0.0, poll=0.01,
                      alive=lambda pid: False)
    result: list[ShipState] = []
    thread = threading.Thread(target=lambda: result.append(shipper.run()))
    thread.start()
    try:
        assert poster.refused.wait(60)  # the shipper met the collector down
        with Receiver(protocol, port=down.port) as rx:
            thread.join(90)
            keys = _keys(rx)
            _json_bodies_only_over_json(rx)
    finally:
        shipper.stop()
        thread.join(10)
    t = result[0].totals()
    assert poster.outcomes[0] == "retry: collector unreachable" and poster.outcomes[-1] == ""
    assert len(keys) == len(set(keys)) == t["events_sent"] == events == 2400
    assert t["events_lost"] == 0 and t["causes"] == {}
