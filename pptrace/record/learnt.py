"""The extract wrapper for a transport whose key prefix was not given: it records what it removed.

    attach, extract = wrap_learning(my_transport.attach_aux, my_transport.pop_aux, recorder)

A target without ``@PREFIX`` that is no engine's own transport (``pptrace.model.target``) has no
prefix to pick the auxiliary keys by before the call, and a process that only extracts (stage 0)
never sees the attach that inserted them. The contract says what an extract does with them on
success: it deletes exactly the auxiliary keys from the dict. So this wrapper holds the dict's
items (references, no metadata read) across the call, and records as the call's tensors the
values under the keys the call removed, in dict order; the recorder learns the process's prefix
from them (``pptrace.model.target.learn_prefix``), as from an attach's inserted keys. A call that
raised removed nothing: it records the values under the prefix learnt so far, if any.

The metadata of a removed value is read after the call (the value itself is held, so it is the
same tensor; only an observer that resized it in place would show its new shape). It is
``pptrace.record.wrapper``'s one extract body, made with no prefix (``wrap_extract(fn, rec,
None)``): the same entries, the same exception and return objects, the same record, and a
failure inside recording is counted and never reaches the engine. Python only (the native
reader's C wrapper picks keys by a prefix): a transport that wants it gives ``@PREFIX``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_attach, wrap_extract

__all__ = ["wrap_extract_learning", "wrap_learning"]

F = TypeVar("F", bound=Callable[..., Any])


def wrap_extract_learning(fn: F, recorder: Recorder) -> F:
    """Wrap an extract function whose key prefix is to be learnt (see the module doc)."""
    return wrap_extract(fn, recorder, None)


def wrap_learning(attach: F, extract: Callable[..., Any], recorder: Recorder) -> tuple[F, Any]:
    """Wrap an (attach, extract) pair whose key prefix the recorder learns: the attach as any
    (``wrap_attach`` records what it inserted), the extract by what it removed."""
    return wrap_attach(attach, recorder), wrap_extract_learning(extract, recorder)
