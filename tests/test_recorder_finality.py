"""Counts that are final: every call is written or counted as lost, and the last stats span says
``final`` whatever the keys and tensors were.

- a non-string key whose ``__repr__`` blocks: the recorder thread never calls it (the key is
  shown by its type's name), so the exit flush keeps its deadline and writes the final span;
- numbers, bytes, None and tuples of them as keys read as their builtin repr, a subclass's
  ``__repr__`` never runs, and a huge key is clipped;
- a call carrying a sparse CSR or a nested tensor is counted as a lost event (never "lost 0
  events (2 internal recorder errors)"), with the Python and the C wrapper alike.
"""

from __future__ import annotations

import enum
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from pptrace.model.config import Config
from pptrace.model.records import PREFIX
from pptrace.record import native
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output
from tests.helpers_core import NATIVE_CACHE, ListSink, real_module
from tests.helpers_recorder import RANK

REAL = real_module()


class BlockingRepr:
    """A key whose ``__repr__`` waits until released (a slow user ``__repr__``)."""

    release = threading.Event()
    called = threading.Event()

    def __repr__(self) -> str:
        self.called.set()
        self.release.wait(60)
        return "BlockingRepr()"


class Number(enum.IntEnum):
    EIGHT = 8

    def __repr__(self) -> str:  # never called by pptrace
        raise AssertionError("pptrace ran a key's __repr__")


def recorder(sink: ListSink, **overrides: Any) -> Recorder:
    config = Config(exporters=("none",), flush_interval=3600, exit_timeout=2.0, **overrides)
    return Recorder(config, sink_factory=lambda _rank: sink, rank_provider=lambda: (RANK, True))


@pytest.fixture
def released() -> Iterator[None]:
    BlockingRepr.release.clear()
    BlockingRepr.called.clear()
    yield
    BlockingRepr.release.set()  # frees a recorder thread that did call it (on old code)


def test_a_blocking_key_repr_never_holds_the_final_stats(released: None) -> None:
    sink = ListSink()
    rec = recorder(sink).start()
    attach, _ = wrap_transport(REAL.add_auxiliary_output_to_pp_tensors,
                               REAL.pop_auxiliary_output_from_pp_tensors, rec)
    for _ in range(6):  # (SGLang's extract itself refuses a key that is not a str)
        d: dict[Any, Any] = {BlockingRepr(): 1, "next_token_ids": torch.zeros(2)}
        attach(d, Output(1))
    rec.shutdown()
    assert not BlockingRepr.called.is_set()
    assert sink.stats and sink.stats[-1].final
    final = sink.stats[-1]
    assert (final.recorded, final.exported, final.dropped) == (6, 6, 0)
    assert sink.events[0].keys_before[0] == f"<{BlockingRepr.__module__}.BlockingRepr object>"


def test_builtin_keys_read_as_their_repr_without_user_code() -> None:
    from pptrace.record.convert import KEY_CHARS

    sink = ListSink()
    rec = recorder(sink)
    attach, _ = wrap_transport(REAL.add_auxiliary_output_to_pp_tensors,
                               REAL.pop_auxiliary_output_from_pp_tensors, rec)
    keys: list[Any] = [7, 2.5, None, b"k", (1, "a", None), ("x",), Number.EIGHT, True,
                       b"x" * 10_000, 10**5000]
    d: dict[Any, Any] = dict.fromkeys(keys, 0)
    attach(d, Output(1))
    rec.flush(final=True)
    (ev,) = sink.events
    shown = ev.keys_before
    assert shown[:8] == ("7", "2.5", "None", "b'k'", "(1, 'a', None)", "('x',)", "8", "True")
    assert shown[8] == repr(b"x" * 10_000)[:KEY_CHARS] + "..."
    assert shown[9] == "<int too long to show>"


# native builds the reader (about 15 s): the slow tier
@pytest.fixture(params=["python", pytest.param("native", marks=pytest.mark.slow)])
def wrapper_kind(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "native":
        monkeypatch.setenv("PPTRACE_NATIVE_DIR", NATIVE_CACHE)
        try:
            native.build()
        except Exception as exc:
            pytest.skip(f"the native reader cannot be built here: {exc}")
    native._loaded = None
    yield request.param
    native._loaded = None


def odd_tensors() -> list[torch.Tensor]:
    with warnings.catch_warnings():  # nested tensors are "prototype", sparse CSR "beta"
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
        return [torch.eye(3).to_sparse_csr(), nested]


def test_sparse_and_nested_tensors_are_counted_as_lost_events(wrapper_kind: str) -> None:
    sink = ListSink()
    rec = recorder(sink, native=wrapper_kind == "native")
    attach, extract = wrap_transport(REAL.add_auxiliary_output_to_pp_tensors,
                                     REAL.pop_auxiliary_output_from_pp_tensors, rec)
    if wrapper_kind == "native":
        assert type(attach).__name__ == "Hot"
    for t in odd_tensors():
        d: dict[Any, Any] = {"next_token_ids": torch.zeros(1)}
        attach(d, Output({"odd": t, "plain": torch.zeros(2)}))
        assert d[PREFIX + "odd"] is t  # the engine's effect is untouched
        got = extract(d, Observer())
        assert got is not None and PREFIX + "odd" not in d
    # A healthy call after them is recorded as usual.
    d = {"next_token_ids": torch.zeros(1)}
    attach(d, Output(1))
    rec.flush(final=True)
    final = sink.stats[-1]
    assert final.final and final.internal_errors == 0
    assert (final.recorded, final.dropped, final.exported) == (5, 4, 1)
    assert [ev.seq for ev in sink.events] == [2]  # the lost ones leave their sequence gap
