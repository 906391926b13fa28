"""The transparent wrapper: record every attach and extract, change nothing the engine sees.

    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, recorder)

Every argument reaches the engine's function as the caller passed it. A plain Python function
of exactly two parameters (SGLang's) gets a wrapper with its own two parameter names: it takes
and refuses the same calls, with the same text, and such a function cannot tell positional from
keyword. Any other transport (a ``--target`` with extra, defaulted, keyword-only or ``*``
parameters) gets an entry taking ``*args, **kwargs`` that hands the call on exactly as it came;
where its tensor dict and output/observer are is worked out once, at wrap time
(``pptrace.record.binding``). They return the identical object and
re-raise the identical exception object (bare ``raise``). On the caller's thread they only read
metadata (keys, shapes, dtypes, devices, contiguity: no device sync, no tensor values) and append
one tuple to the recorder. A failure inside recording is counted by the recorder and never
reaches the engine.

The success paths are written for the engine's thread: no Python call per tensor, no
comprehension frame, plain tensors' metadata kept flat in one list (see ``pptrace.model.raw``),
and ``deque.append`` (C) into the recorder's buffer, the stream cap checked inline. What is left
is mostly the reads themselves: ``benchmarks/bench_hotpath.py`` times them alone ("reads only").
Those paths build the raw tuple as a literal, in ``pptrace.model.raw``'s field order (a call per
event would cost the engine); the cold paths build it by name (``raw.make``), and
``tests/test_recorder_layout.py`` reads every path's raws back by name.

After the recorder's ``shutdown`` (what ``uninstrument()`` calls) ``rec.enabled`` is False and
a wrapper only calls the engine's function: code that still holds it (a class attribute, a
``functools.partial``) records nothing and keeps nothing. A call already inside the engine's
function when shutdown began is looked at again just before its append, and kept out of the
buffer (the C wrapper's check and append run no Python code in between, so no thread runs
there; the Python wrapper's are a few bytecodes apart).

Where the native reader is built, the functions returned are its C wrapper instead, which takes
the common case itself; a wrapper made before a build landed hands its calls to one once it
has (``pptrace.record.hot``: each Python wrapper's ``native_hot`` cell).

``is_wrapped`` knows pptrace's wrappers by identity (their code, the C wrapper's type), never by
an attribute: ``functools.wraps`` copies attributes onto whoever wraps pptrace's wrapper next
(SGLang's plugin ``HookRegistry``), and that wrapper is someone else's. ``unwrap`` peels
pptrace's layers only, stopping at someone else's.

Dict snapshots go through ``dict``'s own methods so that a dict subclass sees no extra calls. A
container that is not a dict is never read (any call into it could have effects the engine would
see): its events carry no keys and no tensors.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
import types
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from pptrace.model import raw as R
from pptrace.model.records import PREFIX, Direction
from pptrace.record import hot
from pptrace.record.binding import Slots, bind
from pptrace.record.convert import qualname
from pptrace.record.reads import fingerprints as _fingerprints
from pptrace.record.reads import flat, inserted_items, meta, removed, under
from pptrace.record.reads import general as _items
from pptrace.record.recorder import Recorder

__all__ = ["is_wrapped", "unwrap", "wrap_attach", "wrap_extract", "wrap_transport"]

F = TypeVar("F", bound=Callable[..., Any])
# What pptrace made, by identity: the code of its Python wrappers and the type of its C wrapper.
# Never an attribute: functools.wraps copies a wrapper's attributes onto whoever wraps it next
# (SGLang's plugin HookRegistry does), and that wrapper is not pptrace's to replace or unwrap.
# By id (a lookup per module global when patching), each kept alive here so its id stays its own.
_OWN_CODES: dict[int, types.CodeType] = {}
#: A body's code with a transport's parameter names, made once per (body, names).
_RENAMED: dict[tuple[int, tuple[str, str]], types.CodeType] = {}
_Function = types.FunctionType

_Tensor = torch.Tensor
_dict_keys = dict.keys
_dict_items = dict.items
_dict_values = dict.values
_dict_get = dict.__getitem__
_islice = itertools.islice
_startswith = str.startswith  # a str subclass key's own startswith is never called
_current_thread = threading.current_thread
# Each thread's threading.Thread, cached: a thread-local read is half a current_thread() call.
_here = threading.local()


def _thread() -> threading.Thread:
    try:
        return _here.thread  # type: ignore[no-any-return]
    except AttributeError:
        _here.thread = thread = _current_thread()
        return thread


def _keys(d: Any) -> tuple[Any, ...]:
    return tuple(_dict_keys(d)) if isinstance(d, dict) else ()


# The general entry's call, handed to the two-parameter body's ``_through`` on this thread.
_pending = threading.local()
_PLAIN_FLAGS = 0x04 | 0x08  # CO_VARARGS | CO_VARKEYWORDS


def _exact_names(fn: Any) -> tuple[str, str] | None:
    """The parameter names of a plain Python function of exactly two parameters (no defaults,
    no ``*``/``**``, none positional- or keyword-only), else None. Such a function cannot tell
    a positional call from a keyword one, so a wrapper with its two parameter names takes every
    call it takes, fails every call it fails with its own text (``functools.wraps`` gives the
    wrapper its name), and calls it positionally: the fast entry."""
    if type(fn) is not _Function or "__wrapped__" in fn.__dict__:
        return None
    code = fn.__code__
    if (code.co_argcount != 2 or code.co_posonlyargcount or code.co_kwonlyargcount
            or code.co_flags & _PLAIN_FLAGS or fn.__defaults__ or fn.__kwdefaults__):
        return None
    return code.co_varnames[0], code.co_varnames[1]


def _through(tensors: Any, subject: Any) -> Any:
    """What the two-parameter body calls for the general entry: the transport, with the call's
    own arguments as they came."""
    fn, args, kwargs = _pending.call
    _pending.call = None
    return fn(*args, **kwargs)


def _renamed(body: Any, names: tuple[str, str]) -> Any:
    """The two-parameter body with the transport's own parameter names (for keyword calls)."""
    code = body.__code__
    if code.co_varnames[:2] == names:
        return body
    renamed = _RENAMED.get((id(code), names))
    if renamed is None:  # (the body's code lives as long as the module: its id stays its own)
        renamed = _RENAMED[(id(code), names)] = code.replace(
            co_varnames=names + code.co_varnames[2:])
        _OWN_CODES[id(renamed)] = renamed
    return _Function(renamed, body.__globals__, body.__name__, None, body.__closure__)


def _entry(fn: Any, slots: Slots, exact: tuple[str, str] | None, body: Any,
           rec: Recorder) -> Any:
    """The wrapper a caller gets: the body itself, with the transport's parameter names, for a
    plain two-parameter function; else an entry that takes any call, finds the dict and the
    subject where Python binds them (``slots``, worked out once) and hands the call as it came
    to the body (``_through``)."""
    if exact is not None:
        return functools.update_wrapper(_renamed(body, exact), fn)
    standard = slots.standard
    native_hot: Any = None  # set by hot.wrapper: the C wrapper, which takes it all

    @functools.wraps(fn)
    def pptrace_call(*args: Any, **kwargs: Any) -> Any:
        if native_hot is not None:
            return native_hot(*args, **kwargs)
        if not rec.enabled:
            return fn(*args, **kwargs)
        picked = args if not kwargs and len(args) == 2 and standard else slots.pick(args, kwargs)
        if picked is None:  # a call the transport refuses: its own TypeError, as bare
            return fn(*args, **kwargs)
        _pending.call = (fn, args, kwargs)
        return body(*picked)

    return pptrace_call


def is_wrapped(fn: Any) -> bool:
    """True when ``fn`` is a wrapper pptrace made (someone else's wrapper around one is not)."""
    tp = type(fn)  # type(), not isinstance(): no user __class__ or metaclass code runs here
    if tp is _Function:
        return id(fn.__code__) in _OWN_CODES
    return id(tp) in hot.OWN_TYPES


def _inner(wrapper: Any) -> Any:
    """The function a wrapper pptrace made calls: its closure's ``fn`` (the C wrapper's
    ``__wrapped__``, which its maker set)."""
    if type(wrapper) is _Function:
        code = wrapper.__code__
        name = "fn" if "fn" in code.co_freevars else "call"  # the general entry's, the exact's
        return (wrapper.__closure__ or ())[code.co_freevars.index(name)].cell_contents
    return wrapper.__dict__["__wrapped__"]


def unwrap(fn: F) -> F:
    """Return what pptrace's wrappers around ``fn`` call (``fn`` itself when not pptrace's);
    stops at someone else's wrapper."""
    while is_wrapped(fn):
        fn = _inner(fn)
    return fn


def wrap_attach(fn: F, recorder: Recorder) -> F:
    """Wrap an attach function (``add_auxiliary_output_to_pp_tensors``)."""
    fn = unwrap(fn)  # never double-wrap
    rec = recorder
    seq = rec.seq[Direction.ATTACH]
    buf, cap, ring = rec.buffer, rec.capacity, rec.flight
    append = rec.append  # deque.append: the cap is checked here, inline
    time_ns, mono_ns = time.time_ns, time.monotonic_ns
    attach = Direction.ATTACH
    reader = hot.reader(rec)
    inserted = reader.inserted if reader is not None else None

    slots = bind(fn)
    exact = _exact_names(fn)
    call = fn if exact else _through  # the general entry hands its call over in _pending

    native_hot: Any = None  # set by hot.wrapper (the exact entry is this body)

    def pptrace_attach(tensors: Any, output: Any) -> Any:
        if native_hot is not None:
            return native_hot(tensors, output)
        if not rec.enabled:
            return call(tensors, output)
        items: Any
        try:
            before = tuple(_dict_keys(tensors)) if isinstance(tensors, dict) else ()
        except Exception as exc:
            rec.internal_error("attach snapshot", exc)
            return call(tensors, output)
        wall, t0 = time_ns(), mono_ns()
        try:
            result = call(tensors, output)
        except BaseException as exc:
            failed(tensors, output, before, wall, t0, mono_ns() - t0, None, exc)
            raise
        try:
            dur = mono_ns() - t0
            if isinstance(tensors, dict):
                after = tuple(_dict_keys(tensors))
                # The inserted items, packed by the native reader in one call, else read here
                # (None: the reader left them to Python), inline: a call per event costs.
                items = inserted(tensors, len(before)) if inserted is not None else None
                if items is None:
                    items = []
                    for k, v in _islice(_dict_items(tensors), len(before), None):
                        if type(v) is _Tensor:
                            try:
                                items += (k, v.shape, v.dtype, v.device, v.is_contiguous())
                                continue
                            except Exception:  # sparse or nested: the general form marks it
                                pass
                        items = _items(_islice(_dict_items(tensors), len(before), None))
                        break
                fps = _fingerprints(rec, list(_islice(_dict_values(tensors), len(before), None))
                                    ) if rec.fingerprint else None
            else:  # a non-dict container: no keys, no items
                after = items = ()
                fps = () if rec.fingerprint else None
            try:
                thread = _here.thread
            except AttributeError:
                thread = _thread()
            # pptrace.model.raw's fields, in order: direction, seq, wall_ns, mono_ns,
            # duration_ns, thread, subject, keys_before, keys_after, items, returned_none,
            # error, dropped, fingerprints.
            raw = (attach, next(seq), wall, t0, dur, thread, type(output), before, after, items,
                   result is None, None, rec.dropped, fps)
            # Shutdown may have begun while fn ran: the final counts then leave this call out.
            if rec.enabled:
                if ring or len(buf) < cap:  # the flight ring's maxlen bounds it instead
                    append(raw)
                else:
                    rec.drop_new()
            if rec.rank_pending:  # the first calls only: the engine's process group is up now
                rec.learn_rank()
        except Exception as inner:
            rec.internal_error("attach record", inner)
        return result

    def failed(tensors: Any, output: Any, before: tuple[Any, ...], wall: int, t0: int,
               dur: int, _items_before: Any, exc: BaseException) -> None:
        """Record an attach the engine's function raised in (then the caller re-raises)."""
        try:
            after = _keys(tensors)
            new = after[len(before):]
            values = [_dict_get(tensors, k) for k in new]
            items = tuple((k, meta(v)) for k, v in zip(new, values, strict=True))
            rec.add(R.make(direction=attach, seq=next(seq), wall_ns=wall, mono_ns=t0,
                           duration_ns=dur, thread=_thread(), subject=type(output),
                           keys_before=before, keys_after=after, items=items,
                           returned_none=True, error=(qualname(type(exc)), str(exc)),
                           dropped=rec.dropped, fingerprints=None))
            if rec.flight:
                rec.request_dump()
        except Exception as inner:
            rec.internal_error("attach record", inner)

    slow = _entry(fn, slots, exact, pptrace_attach, rec)
    return hot.wrapper(rec, reader, slow, fn, attach, seq,  # type: ignore[no-any-return]
                       None, failed, inserted_items, slots)


def wrap_extract(fn: F, recorder: Recorder, prefix: str | None = PREFIX) -> F:
    """Wrap an extract function (``pop_auxiliary_output_from_pp_tensors``) whose transport
    inserts under ``prefix``; None: a prefix to learn, the call's tensors being what it removed
    (``pptrace.record.learnt``)."""
    fn = unwrap(fn)
    rec = recorder
    seq = rec.seq[Direction.EXTRACT]
    buf, cap, ring = rec.buffer, rec.capacity, rec.flight
    append = rec.append  # deque.append: the cap is checked here, inline
    time_ns, mono_ns = time.time_ns, time.monotonic_ns
    extract = Direction.EXTRACT
    learning = prefix is None
    want = "" if prefix is None else prefix  # the keys picked (a learning extract picks none)
    # The recorder thread finds the packed tensors' keys with its own prefix: only that one here
    # (the C wrapper picks keys by a prefix, so a learning extract is Python's alone).
    native_ok = not learning and prefix == rec.prefix
    reader = hot.reader(rec) if native_ok else None
    prefixed = reader.prefixed if reader is not None else None

    slots = bind(fn)
    exact = _exact_names(fn)
    call = fn if exact else _through

    native_hot: Any = None  # set by hot.wrapper (the exact entry is this body)

    def pptrace_extract(tensors: Any, observer: Any) -> Any:
        if native_hot is not None:
            return native_hot(tensors, observer)
        if not rec.enabled:
            return call(tensors, observer)
        try:
            items: Any = None
            pairs: Any = None
            if prefixed is not None and type(tensors) is dict:
                items = prefixed(tensors, want)  # None: the native reader left them to us
            if items is not None:
                before = tuple(_dict_keys(tensors))
            elif learning:
                # The dict's items held across the call (references, nothing read): what the
                # call removes is described after it (see pptrace.record.learnt).
                pairs = tuple(_dict_items(tensors)) if isinstance(tensors, dict) else ()
                before = tuple([k for k, _ in pairs])
            elif isinstance(tensors, dict):
                # As in attach: plain tensors flat, anything else in the general form.
                items = []
                for k, v in _dict_items(tensors):
                    if isinstance(k, str) and _startswith(k, want):
                        if type(v) is _Tensor:
                            try:
                                items += (k, v.shape, v.dtype, v.device, v.is_contiguous())
                                continue
                            except Exception:  # sparse or nested: the general form marks it
                                pass
                        items = _items((k, v) for k, v in _dict_items(tensors)
                                       if isinstance(k, str) and _startswith(k, want))
                        break
                before = tuple(_dict_keys(tensors))
            else:
                items, before = (), ()
            fps = _fingerprints(rec, [v for k, v in _dict_items(tensors)
                                      if isinstance(k, str) and _startswith(k, want)]
                                ) if rec.fingerprint and items else None
        except Exception as exc:
            rec.internal_error("extract snapshot", exc)
            return call(tensors, observer)
        wall, t0 = time_ns(), mono_ns()
        try:
            result = call(tensors, observer)
        except BaseException as exc:
            failed(tensors, observer, before, wall, t0, mono_ns() - t0, items, exc, fps, pairs)
            raise
        try:
            dur = mono_ns() - t0
            after = tuple(_dict_keys(tensors)) if isinstance(tensors, dict) else ()
            if pairs is not None:  # learning: the call's tensors are the values it removed
                gone = removed(pairs, after)
                items = flat(gone)
                fps = _fingerprints(rec, [v for _, v in gone]) if rec.fingerprint else None
            try:
                thread = _here.thread
            except AttributeError:
                thread = _thread()
            # pptrace.model.raw's fields, in order (as in attach).
            raw = (extract, next(seq), wall, t0, dur, thread, type(observer), before, after,
                   items, result is None, None, rec.dropped, fps)
            # Shutdown may have begun while fn ran: the final counts then leave this call out.
            if rec.enabled:
                if ring or len(buf) < cap:  # the flight ring's maxlen bounds it instead
                    append(raw)
                else:
                    rec.drop_new()
            if rec.rank_pending:  # the first calls only: the engine's process group is up now
                rec.learn_rank()
        except Exception as inner:
            rec.internal_error("extract record", inner)
        return result

    def failed(tensors: Any, observer: Any, before: tuple[Any, ...], wall: int, t0: int,
               dur: int, items: Any, exc: BaseException, fps: Any = None,
               pairs: Any = None) -> None:
        """Record an extract the engine's function raised in (then the caller re-raises)."""
        try:
            if pairs is not None:  # learning: a call that raised removed nothing
                items, fps = under(pairs, rec.prefix), None
            rec.add(R.make(direction=extract, seq=next(seq), wall_ns=wall, mono_ns=t0,
                           duration_ns=dur, thread=_thread(), subject=type(observer),
                           keys_before=before, keys_after=_keys(tensors), items=items,
                           returned_none=True, error=(qualname(type(exc)), str(exc)),
                           dropped=rec.dropped, fingerprints=fps))
            if rec.flight:
                rec.request_dump()
        except Exception as inner:
            rec.internal_error("extract record", inner)

    slow = _entry(fn, slots, exact, pptrace_extract, rec)
    return hot.wrapper(rec, reader, slow, fn, extract, seq,  # type: ignore[no-any-return]
                       prefix, failed, None, slots, native_ok=native_ok)


def wrap_transport(attach: F, extract: Callable[..., Any], recorder: Recorder,
                   prefix: str = PREFIX) -> tuple[F, Any]:
    """Wrap an (attach, extract) pair with one recorder (``prefix``: as ``wrap_extract``)."""
    return wrap_attach(attach, recorder), wrap_extract(extract, recorder, prefix)


# The code objects every Python wrapper made by wrap_attach and wrap_extract runs.
_OWN_CODES.update((id(c), c) for maker in (wrap_attach, wrap_extract, _entry)
                  for c in maker.__code__.co_consts
                  if isinstance(c, types.CodeType) and c.co_name in ("pptrace_attach",
                                                                     "pptrace_extract",
                                                                     "pptrace_call"))
