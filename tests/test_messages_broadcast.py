"""Broadcasts recorded by ``pptrace.record.message_broadcast``: numbered by counters of their
own, apart from the process's point-to-point sends and receives, written and loaded back as
such; a source whose broadcast raises re-raises the same exception object and is recorded as a
send that raised, which the analyzer names ``message-raised``. A member's asynchronous receive
(``wrap_broadcast_irecv``) is begun when posted and ended at the caller's own wait, with what
arrived; the wait returns and raises what the handle does; a call that posts nothing records
nothing.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from pptrace.analyze.analyzer import analysis
from pptrace.load.loader import load_paths
from pptrace.model.findings import FindingKind, MessageId, Severity
from pptrace.model.messages import MessageOp
from pptrace.record.message_broadcast import wrap_broadcast, wrap_broadcast_irecv
from pptrace.record.messages import MessageLog, wrap_recv, wrap_send
from tests.test_messages_record import recorder

GROUP = (3, 1)  # global ranks; the recording process is rank 3 (tests.test_messages_record)
ERR = RuntimeError("broadcast failed")


def _group_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[int], int, int]:
    """(the group's global ranks, the source's index, the caller's index): rank 3 is index 0."""
    return list(GROUP), kwargs["src"], 0


def _broadcast(d: dict[str, Any] | None, src: int, fail: bool = False) -> dict[str, Any]:
    if fail:
        raise ERR
    return d if d is not None else {"next_token_ids": torch.arange(3), "__msg_type__": "output"}


def _send(d: dict[str, Any], dst: int) -> None:
    return None


def _recv(src: int) -> dict[str, Any]:
    return {"hidden_states": torch.zeros(2, 2), "__msg_type__": "proxy"}


def _peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int | None, int]:
    peer = args[-1]
    return peer, 0, 1


def test_broadcasts_are_numbered_apart_and_a_raising_source_is_message_raised(
        tmp_path: Any) -> None:
    rec = recorder(tmp_path).start()
    log = MessageLog(rec)
    bcast = wrap_broadcast(_broadcast, log, _group_of, dict_arg=0)
    send = wrap_send(_send, log, _peer, dict_arg=0)
    recv = wrap_recv(_recv, log, _peer)
    try:
        mine = {"next_token_ids": torch.arange(3), "__msg_type__": "output"}
        assert bcast(mine, src=0) is mine  # the source's own dict, as the engine returns it
        send({"x": torch.ones(2)}, 1)
        recv(1)
        assert bcast(None, src=1)["__msg_type__"] == "output"  # a member's receive
        with pytest.raises(RuntimeError) as raised:
            bcast(mine, src=0, fail=True)
        assert raised.value is ERR
        send({"x": torch.ones(2)}, 1)
        recv(1)
    finally:
        rec.shutdown()
    assert rec.internal_errors == 0 and log.dropped == 0
    trace = load_paths([os.path.join(tmp_path, f) for f in os.listdir(tmp_path)])
    (proc,) = trace.processes
    numbers = {(m.op, m.broadcast, m.phase): [] for m in proc.messages}
    for m in proc.messages:
        numbers[(m.op, m.broadcast, m.phase)].append(m.seq)
    # Each counter from 0: the broadcasts took none of the point-to-point numbers.
    assert numbers == {
        (MessageOp.SEND, True, "end"): [0, 1], (MessageOp.SEND, False, "end"): [0, 1],
        (MessageOp.RECV, False, "begin"): [0, 1], (MessageOp.RECV, False, "end"): [0, 1],
        (MessageOp.RECV, True, "begin"): [0], (MessageOp.RECV, True, "end"): [0]}
    found = [f for f in analysis(trace).findings if f.kind.category.value == "message"]
    assert [(f.kind, f.severity, f.messages) for f in found] == [
        (FindingKind.MSG_RAISED, Severity.ERROR,
         (MessageId(0, MessageOp.SEND, 1, broadcast=True),))]
    assert found[0].message == (
        "rank 3 (pp1/tp1) broadcast send #1 of an `output` message to its group [3, 1] raised "
        "RuntimeError: broadcast failed")


class _Work:
    """A work handle: ``wait`` lets the tensor land (or fails); ``is_completed`` is its own."""

    def __init__(self, runner: Any, fail: bool) -> None:
        self.runner, self.fail = runner, fail

    def wait(self, timeout: Any = None) -> bool:
        if self.fail:
            raise ERR
        self.runner.buffer.fill_(7)
        return True

    def is_completed(self) -> str:
        return "own"


class _Runner:
    """Posts a receive into ``buffer`` and keeps its work in ``work`` (as vLLM's V1 runner)."""

    work: Any = None
    buffer: Any = None

    def post(self, skip: bool = False, fail: bool = False) -> str:
        if not skip:
            self.buffer = torch.zeros(4, 1, dtype=torch.int32)
            self.work = _Work(self, fail)
        return "posted"


def test_a_posted_broadcast_receive_ends_at_the_callers_wait(tmp_path: Any) -> None:
    rec = recorder(tmp_path).start()
    log = MessageLog(rec)
    post = wrap_broadcast_irecv(_Runner.post, log, lambda a, k: (list(GROUP), 1, 0), "work",
                                lambda a, k: {"ids": a[0].buffer})
    runner = _Runner()
    try:
        assert post(runner) == "posted"
        work = runner.work
        assert work.is_completed() == "own"  # everything but wait is the handle's own
        assert log.recorded == 1  # begun, not ended before the caller waits
        assert work.wait(timeout=5) is True
        assert work.wait() is True  # a second wait records nothing more
        runner.work = None
        assert post(runner, skip=True) == "posted"  # nothing posted: nothing recorded
        post(runner, fail=True)
        with pytest.raises(RuntimeError) as raised:
            runner.work.wait()
        assert raised.value is ERR
    finally:
        rec.shutdown()
    assert rec.internal_errors == 0
    trace = load_paths([os.path.join(tmp_path, f) for f in os.listdir(tmp_path)])
    (proc,) = trace.processes
    got = [(m.seq, m.phase, m.peer, m.group, m.error_type) for m in proc.messages]
    assert got == [(0, "begin", 1, GROUP, None), (0, "end", 1, GROUP, None),
                   (1, "begin", 1, GROUP, None), (1, "end", 1, GROUP, "RuntimeError")]
    arrived = proc.messages[1]
    assert arrived.keys == ("ids",) and arrived.tensors[0].shape == (4, 1)
    assert arrived.tensors[0].dtype == "int32"
