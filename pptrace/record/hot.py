"""The native reader's C wrapper in front of the Python one: made when a wrapper is made, or
later, when a build lands while the process runs.

Where ``pptrace native build`` (or ``pptrace run``'s background build) has built the native
reader (``pptrace.record.native``), a wrapper is its C wrapper (``wrapper``): it records the
common case itself (the same raw tuple, the tensors' metadata packed in one call) and hands
every other call to the Python wrapper before the engine's function runs, and the engine's
exceptions to the same ``failed`` recorders.

A process that found no build when it wrapped (the first start of ``pptrace run`` in a new
environment builds in the background, about 20 s) gets the Python wrapper, and keeps it
wherever the engine holds it (module globals, a consumer's ``from ... import``, a bound
reference). ``wrapper`` has the recorder thread look for the build once a second
(``Recorder.upkeep``: one ``stat``, off the engine's thread); once it is there and passes its
self-test, the C wrapper is made as it would have been, and set in the Python wrapper's
``native_hot`` cell: from the next call on, the Python wrapper's first bytecodes hand the call
to it. Its own fallback for the calls it does not take is a copy of the Python wrapper whose
cell is empty, so a call handed back is recorded by Python and never handed to it again.
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable
from typing import Any

from pptrace.model.records import Direction
from pptrace.record import native
from pptrace.record.binding import Slots
from pptrace.record.recorder import HOT_READS, Recorder

__all__ = ["OWN_TYPES", "reader", "wrapper"]

#: The C wrapper's type, by id (``wrapper.is_wrapped`` reads it), each kept alive here.
OWN_TYPES: dict[int, type] = {}
#: The name of the cell a Python wrapper hands its calls on from, once the C wrapper is made.
CELL = "native_hot"


def reader(rec: Recorder) -> Any:
    """The native metadata reader when the config allows it and it loads here, else None."""
    if not rec.config.native:
        return None
    try:
        return native.reader()
    except Exception as exc:  # the Python reads record the same events
        rec.internal_error("native reader", exc)
        return None


def wrapper(rec: Recorder, loaded: Any, entry: types.FunctionType, fn: Any,
            direction: Direction, seq: Any, prefix: str | None, on_error: Any, on_items: Any,
            slots: Slots, *, native_ok: bool = True) -> Any:
    """What wrapping ``fn`` returns: with the ``loaded`` reader, its C wrapper in front of the
    Python wrapper ``entry`` (``_make``); without one, ``entry``, handed to the C wrapper by the
    recorder thread once a build lands (``_later``). ``native_ok``: False where the C wrapper is
    never made for this wrapper (an extract that learns its prefix, or another prefix)."""
    if loaded is not None:
        return _make(rec, loaded, entry, fn, direction, seq, prefix, on_error, on_items, slots)
    if native_ok and rec.config.native and _fits(rec, slots) and native.waiting():
        rec.upkeep(_later(rec, entry, fn, direction, seq, prefix, on_error, on_items, slots))
    return entry


def _fits(rec: Recorder, slots: Slots) -> bool:
    """Whether the C wrapper can take this transport's common case: no fingerprints (read by
    Python), and (tensors, subject) as its first two positional parameters (what it reads)."""
    return not rec.fingerprint and slots.standard


def _make(rec: Recorder, loaded: Any, slow: Any, fn: Any, direction: Direction,
          seq: Any, prefix: str | None, on_error: Any, on_items: Any, slots: Slots) -> Any:
    """The ``loaded`` reader's C wrapper around ``fn`` when it ``_fits``, else the Python
    wrapper ``slow`` (which the C one hands every other case to: extra or keyword
    arguments)."""
    if not _fits(rec, slots):
        return slow
    try:
        hot = loaded.hot(fn=fn, slow=slow, rec=rec, reads=HOT_READS, direction=direction,
                         seq=seq, buf=rec.buffer, append=rec.append, cap=rec.capacity,
                         ring=rec.flight, prefix=prefix, on_error=on_error, on_items=on_items,
                         thread=threading.current_thread, drop_new=rec.drop_new,
                         internal_error=rec.internal_error, learn_rank=rec.learn_rank)
        functools.update_wrapper(hot, fn)  # its __wrapped__ is fn: unwrap() reads it there
        OWN_TYPES.setdefault(id(type(hot)), type(hot))
        # Pickled by name, as a function is: it works where the module's name is bound to it.
        name = getattr(fn, "__qualname__", None)
        if isinstance(name, str):
            hot.__reduce_ex__ = lambda _protocol: name
    except Exception as exc:  # the Python wrapper records the same events
        rec.internal_error("native wrapper", exc)
        return slow
    return hot


def _later(rec: Recorder, entry: types.FunctionType, fn: Any, direction: Direction, seq: Any,
           prefix: str | None, on_error: Any, on_items: Any, slots: Slots
           ) -> Callable[[], bool]:
    """The recorder thread's task: once a build lands (and loads), make the C wrapper and set
    it in ``entry``'s cell, its fallback a copy of ``entry`` whose cell stays empty; done then,
    or once no build can come any more (a library that failed to load or its self-test)."""

    def take() -> bool:
        loaded = native.arrived()
        if loaded is None:
            return not native.waiting()
        at = entry.__code__.co_freevars.index(CELL)
        cells = entry.__closure__ or ()
        empty = cells[:at] + (types.CellType(None),) + cells[at + 1:]
        slow = types.FunctionType(entry.__code__, entry.__globals__, entry.__name__,
                                  entry.__defaults__, empty)
        functools.update_wrapper(slow, fn)
        hot = _make(rec, loaded, slow, fn, direction, seq, prefix, on_error, on_items, slots)
        if hot is not slow:
            cells[at].cell_contents = hot
        return True

    return take
