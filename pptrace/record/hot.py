"""The native reader's C wrapper in front of the Python one: made when a wrapper is made, or
later, when a build lands while the process runs.

Where ``pptrace native build`` (or ``pptrace run``'s background build) has built the native
reader (``pptrace.record.native``), a wrapper is its C wrapper (``make``): it records the
common case itself (the same raw tuple, the tensors' metadata packed in one call) and hands
every other call to the Python wrapper before the engine's function runs, and the engine's
exceptions to the same ``failed`` recorders.

A process that found no build when it wrapped (the first start of ``pptrace run`` in a new
environment builds in the background, about 20 s) gets the Python wrapper, and keeps it
wherever the engine holds it (module globals, a consumer's ``from ... import``, a bound
reference). ``later`` has the recorder thread look for the build once a second
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
from typing import Any

from pptrace.model.records import Direction
from pptrace.record import native
from pptrace.record.binding import Slots
from pptrace.record.recorder import HOT_READS, Recorder

__all__ = ["OWN_TYPES", "later", "make", "reader"]

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


def make(rec: Recorder, loaded: Any, slow: Any, fn: Any, direction: Direction,
         seq: Any, prefix: str | None, on_error: Any, on_items: Any, slots: Slots) -> Any:
    """The ``loaded`` reader's C wrapper around ``fn`` when it can take the common case, else
    the Python wrapper ``slow`` (which the C one hands every other case to: extra or keyword
    arguments). A transport whose first two parameters are not (tensors, subject) by position
    gets the Python wrapper alone: the C one reads its two positional arguments as those."""
    if loaded is None or rec.fingerprint or not slots.standard:
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


def later(rec: Recorder, entry: types.FunctionType, fn: Any, direction: Direction, seq: Any,
          prefix: str | None, on_error: Any, on_items: Any, slots: Slots) -> None:
    """Have the recorder thread hand ``entry`` (a Python wrapper made without a reader) to the
    C wrapper once a build lands, if ``make`` would make one for it then."""
    if not rec.config.native or rec.fingerprint or not slots.standard:
        return
    if not native.waiting():  # a build that failed to load or its self-test: never used
        return

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
        hot = make(rec, loaded, slow, fn, direction, seq, prefix, on_error, on_items, slots)
        if hot is not slow:
            cells[at].cell_contents = hot
        return True

    rec.upkeep(take)
