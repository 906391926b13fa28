"""Which output send carries which attach, under the process's own prefix: ``carries_attach``.

A send of an output dict that holds keys under the process's transport prefix is numbered (the
process's n-th such send carries its n-th attach that inserted keys). The prefix is the
process's own: given (``--target ...@PREFIX``), or learnt by the recorder from the first attach,
which happens on the recorder's thread after the send was made, so the number is given at
conversion. Here with the ``__aux__.`` transport of ``tests.helpers_own_prefix``; the send comes
before the recorder's thread ever ran.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from pptrace.load.loader import load_paths
from pptrace.model.messages import MessageOp
from pptrace.record.learnt import wrap_learning
from pptrace.record.messages import MessageLog, wrap_send
from tests import helpers_own_prefix
from tests.test_messages_record import recorder


class _Output:
    def __init__(self, step: int) -> None:
        self.step = step

    def to_pp_tensors(self) -> dict[str, Any]:
        return {"scores": torch.ones(3) * self.step, "ids": torch.arange(3)}


def _peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int | None, int]:
    return 0, 0, 1


@pytest.mark.parametrize("given", [True, False], ids=["given", "learnt"])
def test_an_output_send_under_an_own_prefix_carries_its_attach(tmp_path: Any,
                                                                 given: bool) -> None:
    aux = helpers_own_prefix.transport()
    rec = recorder(tmp_path)
    rec.prefix = helpers_own_prefix.PREFIX if given else None
    attach, _ = wrap_learning(aux.attach_aux, aux.pop_aux, rec)
    send = wrap_send(lambda d, dst: None, MessageLog(rec), _peer)
    for step in range(2):
        d: dict[str, Any] = {"next_token_ids": torch.arange(3), "__msg_type__": "output"}
        attach(d, _Output(step))
        send(d, 0)
        send({"next_token_ids": torch.arange(3), "__msg_type__": "output"}, 0)  # nothing aux
    assert rec.prefix == (helpers_own_prefix.PREFIX if given else None)  # not learnt yet
    rec.start()
    rec.shutdown()
    assert rec.internal_errors == 0
    trace = load_paths([os.path.join(tmp_path, f) for f in os.listdir(tmp_path)])
    (proc,) = trace.processes
    sends = [m for m in proc.messages if m.op is MessageOp.SEND]
    assert [m.carries_attach for m in sends] == [0, None, 1, None]
    assert proc.stats is not None and proc.stats.prefix == helpers_own_prefix.PREFIX


def test_a_dropped_output_send_keeps_its_number(tmp_path: Any) -> None:
    """A send dropped on a full buffer still takes its ordinal, as the attach it carries does."""
    aux = helpers_own_prefix.transport()
    rec = recorder(tmp_path)
    rec.prefix = None
    attach, _ = wrap_learning(aux.attach_aux, aux.pop_aux, rec)
    log = MessageLog(rec, capacity=1)
    send = wrap_send(lambda d, dst: None, log, _peer)
    for step in range(2):  # the second send finds the buffer full
        d: dict[str, Any] = {"__msg_type__": "output"}
        attach(d, _Output(step))
        send(d, 0)
    rec.start()
    rec.flush()
    d = {"__msg_type__": "output"}
    attach(d, _Output(2))
    send(d, 0)
    rec.shutdown()
    assert log.dropped == 1
    trace = load_paths([os.path.join(tmp_path, f) for f in os.listdir(tmp_path)])
    (proc,) = trace.processes
    assert [m.carries_attach for m in proc.messages] == [0, 2]
