"""Recording never synchronises with the device: no .item(), .cpu(), .tolist(), .numpy() on the
recorded tensors, in either mode (fingerprinting off). Every tensor operation during a wrapped call
is observed and compared with the bare call's; pptrace may add metadata reads only.

On a GPU, ``scripts/gpu_sync_check.py`` runs the same calls under
``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

import pptrace.record.engine as engine
from pptrace.model import raw as R
from pptrace.model.config import Config
from pptrace.record import native
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output
from tests.helpers_recorder import MemorySink, recorder

SYNCING = ("item", "cpu", "tolist", "numpy")
#: What the wrapper may do to a tensor beyond what the engine does: read its metadata.
METADATA = {"shape", "dtype", "device", "is_contiguous", "__get__"}


class Spy(TorchFunctionMode):
    """Records the name of every torch function or tensor method called while active."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", None) or repr(func)
        owner = getattr(func, "__self__", None)
        if name == "__get__" and owner is not None:  # a property: shape, dtype, device
            name = getattr(owner, "__name__", name)
        self.calls.append(name)
        return func(*args, **(kwargs or {}))


@contextmanager
def spying(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Spy, list[str]]]:
    """A torch-function spy plus direct patches of the syncing methods (belt and braces)."""
    direct: list[str] = []
    for name in SYNCING:
        original = getattr(torch.Tensor, name)

        def patched(self: torch.Tensor, *a: Any, _n: str = name, _o: Any = original,
                    **k: Any) -> Any:
            direct.append(_n)
            return _o(self, *a, **k)

        patched.__name__ = name
        monkeypatch.setattr(torch.Tensor, name, patched)
    spy = Spy()
    with spy:
        yield spy, direct
    monkeypatch.undo()


def _round_trip(attach: Callable[..., Any], extract: Callable[..., Any]) -> None:
    output = Output(4)
    tensors: dict[str, Any] = {"next_token_ids": torch.arange(4)}
    attach(tensors, output)
    extract(tensors, Observer())


def test_the_spy_sees_a_sync_when_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    t = torch.ones(3)
    with spying(monkeypatch) as (spy, direct):
        t.sum().item()
        _ = t.shape
    assert "item" in spy.calls and set(direct) == {"item"}
    assert "shape" in spy.calls


@pytest.mark.parametrize("mode", ["stream", "flight"])
def test_recording_calls_no_syncing_method(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = (engine.add_auxiliary_output_to_pp_tensors, engine.pop_auxiliary_output_from_pp_tensors)
    sink = MemorySink()
    rec = recorder(Config(mode=mode, fingerprint=False), sink)
    wrapped = wrap_transport(*bare, rec)
    with spying(monkeypatch) as (bare_spy, bare_direct):
        _round_trip(*bare)
    with spying(monkeypatch) as (spy, direct):
        _round_trip(*wrapped)
    assert rec.recorded == 2
    assert direct == [] and not set(spy.calls) & set(SYNCING), spy.calls
    # What pptrace added on the caller's thread is metadata reads, and it did read them.
    added = set(spy.calls) - set(bare_spy.calls)
    assert added <= METADATA, added
    if native.reader() is None:
        assert {"shape", "is_contiguous"} <= set(spy.calls)
    else:  # the native reader read them in C++, where no torch function mode sees it
        assert [type(raw[R.ITEMS]) for raw in rec.buffer] == [bytes, bytes]
    # The background conversion touches no tensor at all (only the recorded metadata).
    with spying(monkeypatch) as (bg_spy, bg_direct):
        rec.shutdown(timeout=5.0)
    assert bg_spy.calls == [] and bg_direct == []
    assert len(sink.events) == 2


@pytest.mark.slow  # a subprocess that builds the native reader if the suite has not (20 s)
def test_the_gpu_check_runs_its_own_code_on_the_cpu() -> None:
    """``scripts/gpu_sync_check.py`` runs only where a GPU is lent: ``--cpu`` runs its checks'
    code here, so that a moved import or a changed record breaks a test, not the next GPU run
    (it once imported a module that had moved). Its build of the native reader is the suite's
    one (``helpers_core.NATIVE_CACHE``, keyed by what the binary depends on)."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.helpers_core import NATIVE_CACHE

    script = Path(__file__).resolve().parent.parent / "scripts" / "gpu_sync_check.py"
    done = subprocess.run([sys.executable, str(script), "--cpu"], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "PPTRACE_NATIVE_DIR": NATIVE_CACHE})
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    assert any(line.split()[:2] == ["python", "stream"] for line in verdicts), done.stdout
    assert any(line.split()[:2] == ["messages", "send+recv"] for line in verdicts), done.stdout
    assert all(line.endswith("no device synchronisation") or "native reader" in line
               for line in verdicts), done.stdout
