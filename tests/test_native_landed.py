"""A native build that lands while the process runs is taken up (``pptrace.record.hot``).

``pptrace run``'s first start in a new environment builds the native reader in the background
(about 20 s); the engine's processes wrapped before it was there. Their Python wrappers, wherever
the engine holds them, hand their calls to the C wrapper from the recorder thread's next upkeep
round after the library appears (renamed into place, as the build writes it):

- the same function objects record the same events, the tensors' metadata now packed by the C
  wrapper, and the calls it does not take (keywords, a dict subclass, a value that is not a
  tensor) recorded by the Python wrapper, never handed back to it;
- the engine's very exception object is re-raised through the hand-over and recorded;
- with no build, the wrappers keep recording on the Python reads and keep waiting; a library
  that fails to load is given up, never used; nothing waits where the C wrapper would not be
  made (``PPTRACE_NATIVE=0``, fingerprints, a learning extract).

The suite's one build (``helpers_core.NATIVE_CACHE``) is copied where the process looks; the
differential suite against SGLang's real module runs on landed wrappers in
``tests/test_wrapper_passthrough.py``, a real ``pptrace run`` in
``tests/test_startup_native_build.py``.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import pptrace.record.engine as engine
from pptrace.model import raw as R
from pptrace.model.config import Config
from pptrace.model.records import PREFIX
from pptrace.record import native
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import is_wrapped, unwrap, wrap_extract
from tests.doubles import Observer, Output
from tests.helpers_core import NATIVE_CACHE, handed_to, land_build
from tests.helpers_recorder import MemorySink, recorder, wait_for, wrapped

pytestmark = pytest.mark.slow  # the suite's build of the reader (about 15 s, once a machine)


@pytest.fixture(scope="module")
def build() -> Path:
    """The suite's build of the reader (made here if this machine has none yet)."""
    saved = os.environ["PPTRACE_NATIVE_DIR"]
    os.environ["PPTRACE_NATIVE_DIR"] = NATIVE_CACHE
    try:
        return native.build()
    except Exception as exc:
        pytest.skip(f"the native reader cannot be built here: {exc}")
    finally:
        os.environ["PPTRACE_NATIVE_DIR"] = saved


@pytest.fixture
def landing(build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An empty build folder for this process; calling the result puts the build there."""
    monkeypatch.setenv("PPTRACE_NATIVE_DIR", str(tmp_path / "native"))
    native._loaded = None
    yield land_build
    native._loaded = None


def pair(attach: Any, extract: Any, n: int = 2) -> None:
    d: dict[str, Any] = {"next_token_ids": torch.zeros(4, dtype=torch.long)}
    attach(d, Output(n))
    extract(d, Observer())


def plain(events: list[Any]) -> list[Any]:
    """Events without what differs from one call to the next."""
    return [e._replace(seq=0, start_ns=0, mono_ns=0, duration_ns=0) for e in events]


@pytest.mark.parametrize("mode", ["stream", "flight"])
def test_the_wrappers_take_up_a_build_that_lands_on_the_recorder_thread(
        landing: Any, mode: str) -> None:
    sink = MemorySink()
    rec = recorder(Config(flush_interval=3600, mode=mode), sink).start()
    attach, extract = wrapped(rec)
    assert type(attach) is types.FunctionType and handed_to(attach) is None
    pair(attach, extract)
    assert [type(raw[R.ITEMS]) for raw in rec.buffer] == [list, list]  # the Python reads
    landing()
    # The recorder thread's next upkeep round (about once a second), not this thread.
    assert wait_for(lambda: not rec._upkeep, 10), "the build was not taken up"
    assert native.status().loaded and native.status().reason == "in use"
    for w, fn in ((attach, engine.add_auxiliary_output_to_pp_tensors),
                  (extract, engine.pop_auxiliary_output_from_pp_tensors)):
        assert type(handed_to(w)).__name__ == "Hot"
        assert is_wrapped(w) and unwrap(w) is fn and is_wrapped(handed_to(w))
    pair(attach, extract)
    assert [type(raw[R.ITEMS]) for raw in rec.buffer] == [list, list, bytes, bytes]
    rec.shutdown(5.0)
    assert rec.internal_errors == 0 and rec.dropped == 0
    before, after = plain(sink.events[:2]), plain(sink.events[2:])
    assert len(after) == 2 and after == before  # the same events, read in C
    assert [e.seq for e in sink.events] == [0, 0, 1, 1]  # one sequence across the hand-over


def test_calls_the_c_wrapper_leaves_are_recorded_by_python_after_the_hand_over(
        landing: Any) -> None:
    sink = MemorySink()
    rec = recorder(Config(flush_interval=3600), sink)
    attach, extract = wrapped(rec)
    landing()
    rec._run_upkeep()  # what the recorder thread runs: this test has no thread
    assert type(handed_to(attach)).__name__ == "Hot"

    class D(dict):  # type: ignore[type-arg]
        pass

    attach(tensors=D(next_token_ids=torch.zeros(1)), output=Output(1))  # keywords, a subclass
    d: dict[str, Any] = {"next_token_ids": torch.zeros(1)}
    attach(d, Output({"t": torch.zeros(2), "n": torch.nn.Parameter(torch.zeros(1))}))
    extract(d, Observer())  # a Parameter is not exactly a Tensor: the Python reads
    pair(attach, extract)
    # Packed by the C wrapper (bytes), or read by Python (its flat list, its general form).
    assert [type(raw[R.ITEMS]) is bytes for raw in rec.buffer] == [False] * 3 + [True] * 2
    rec.shutdown(5.0)
    assert rec.internal_errors == 0 and len(sink.events) == 5
    assert sink.events[1].names == ("t", "n") == sink.events[2].names


def test_the_engines_very_exception_comes_through_the_hand_over(landing: Any) -> None:
    sink = MemorySink()
    rec = recorder(Config(flush_interval=3600), sink)
    boom = KeyError("the engine's own")

    def extract_fn(tensors: Any, observer: Any) -> Any:
        tensors.pop(PREFIX + "x")
        raise boom

    extract = wrap_extract(extract_fn, rec)
    landing()
    rec._run_upkeep()
    assert type(handed_to(extract)).__name__ == "Hot"
    d: dict[str, Any] = {"next_token_ids": torch.zeros(1), PREFIX + "x": torch.zeros(3)}
    with pytest.raises(KeyError) as caught:
        extract(d, Observer())
    assert caught.value is boom and caught.traceback[-1].name == "extract_fn"
    assert d == {"next_token_ids": d["next_token_ids"]}  # the engine's effect, and no other
    rec.shutdown(5.0)
    (event,) = sink.events
    assert (event.error_type, event.names) == ("KeyError", ("x",))
    assert rec.internal_errors == 0


def test_without_a_build_the_wrappers_keep_recording_and_waiting(landing: Any) -> None:
    sink = MemorySink()
    rec = recorder(Config(flush_interval=3600), sink)
    attach, extract = wrapped(rec)
    for _ in range(3):
        rec._run_upkeep()
        pair(attach, extract)
    assert len(rec._upkeep) == 2 and handed_to(attach) is None  # still waiting, one per wrapper
    assert not native.status().loaded and "not built" in native.status().reason
    rec.shutdown(5.0)
    assert len(sink.events) == 6 and rec.internal_errors == 0


def test_a_library_that_fails_to_load_is_given_up_and_never_used(landing: Any) -> None:
    sink = MemorySink()
    rec = recorder(Config(flush_interval=3600), sink)
    attach, extract = wrapped(rec)
    landing(b"\x7fELF not really a library")
    rec._run_upkeep()
    assert rec._upkeep == [] and handed_to(attach) is None  # given up: no more looking
    assert native.status().reason.startswith("failed to load")
    landing()  # a good one later is not tried: a process loads a library once
    assert native.arrived() is None and not native.waiting()
    pair(attach, extract)
    rec.shutdown(5.0)
    assert len(sink.events) == 2 and rec.internal_errors == 0


@pytest.mark.parametrize("config", [Config(flush_interval=3600, native=False),
                                    Config(flush_interval=3600, fingerprint=True)],
                         ids=["native off", "fingerprints"])
def test_nothing_waits_where_the_c_wrapper_would_not_be_made(
        landing: Any, config: Config) -> None:
    rec = recorder(config, MemorySink())
    wrapped(rec)
    assert rec._upkeep == []
    rec.shutdown(5.0)


def test_a_learning_extract_does_not_wait(landing: Any) -> None:
    rec: Recorder = recorder(Config(flush_interval=3600), MemorySink())
    wrap_extract(engine.pop_auxiliary_output_from_pp_tensors, rec, prefix=None)
    assert rec._upkeep == []
    rec.shutdown(5.0)
