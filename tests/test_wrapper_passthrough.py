"""A wrapper passes every argument through exactly as the transport was called.

Differential: each call runs bare and wrapped on fresh copies of the same inputs, and the two
must agree on the returned object (``is``), the exception (type and message), the dict's keys
and values by identity afterwards, and what the transport itself received (its positional
arguments, its keyword arguments, which defaults the caller left out). The transports are
SGLang's real functions, called by their own keyword names, and user transports (``--target``)
with extra positional, keyword-only, defaulted, ``*args`` and ``**kwargs`` parameters. Every
call that binds records one event that names the right keys.

Both wrappers are tried: the Python one and, where the native reader is built, its C wrapper
(which hands every call that is not two positional arguments to the Python one).
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction
from pptrace.record import native
from pptrace.record.binding import bind
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import unwrap, wrap_attach, wrap_extract
from tests.doubles import Observer, Output
from tests.helpers_core import (
    NATIVE_CACHE,
    ListSink,
    handed_to,
    land_build,
    make_recorder,
    real_module,
)

REAL = real_module()
NAMED = {"a": torch.zeros(2, 3), "b": torch.ones(4)}
UNSET = object()  # a user transport's own "not given" sentinel


class Received:
    """What a user transport was called with, for the bare and the wrapped run to compare."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []


def user_transports(seen: Received) -> dict[str, tuple[Callable[..., Any], str]]:
    """User transports with parameters beyond SGLang's two, each delegating to SGLang's."""

    def attach_extra(tensors: Any, output: Any, stage: int = 0, *, strict: Any = UNSET) -> Any:
        seen.calls.append(((tensors, output, stage), {"strict": strict}))
        if strict is not UNSET and stage < 0:
            raise ValueError(f"stage {stage} with strict={strict!r}")
        REAL.add_auxiliary_output_to_pp_tensors(tensors, output)
        return (stage, strict)

    def attach_kwargs(tensors: Any, output: Any = None, **options: Any) -> Any:
        seen.calls.append(((tensors, output), dict(options)))
        REAL.add_auxiliary_output_to_pp_tensors(tensors, output)
        return options

    def extract_extra(tensors: Any, observer: Any, timeout: float = 1.0, *more: Any) -> Any:
        seen.calls.append(((tensors, observer, timeout, *more), {}))
        return REAL.pop_auxiliary_output_from_pp_tensors(tensors, observer)

    def extract_kwonly(tensors: Any, *, observer: Any, group: Any = None) -> Any:
        seen.calls.append(((tensors,), {"observer": observer, "group": group}))
        return REAL.pop_auxiliary_output_from_pp_tensors(tensors, observer)

    def attach_named(d: Any, out: Any) -> Any:  # two parameters of its own names: the fast entry
        seen.calls.append(((d, out), {}))
        return REAL.add_auxiliary_output_to_pp_tensors(d, out)

    return {"attach_named": (attach_named, "attach"),
            "attach_extra": (attach_extra, "attach"), "attach_kwargs": (attach_kwargs, "attach"),
            "extract_extra": (extract_extra, "extract"),
            "extract_kwonly": (extract_kwonly, "extract")}


# (transport, args, kwargs): the subject is "OUT" or "OBS", the dict "D" (built fresh per run).
# records: whether the call binds the dict and the subject (else nothing is recorded).
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any], bool]] = [
    ("sglang_attach", ("D",), {"output": "OUT"}, True),
    ("sglang_attach", (), {"output": "OUT", "tensors": "D"}, True),
    ("sglang_attach", ("D", "OUT"), {}, True),
    ("sglang_attach", ("D", None), {}, True),
    ("sglang_attach", ("D",), {}, False),  # missing: the engine's TypeError
    ("sglang_attach", ("D", "OUT"), {"output": "OUT"}, False),  # twice: the engine's TypeError
    ("sglang_extract", (), {"tensors": "DX", "observer": "OBS"}, True),
    ("sglang_extract", ("DX",), {"observer": None}, True),  # the engine's no-observer error
    ("sglang_extract", ("DX", "OBS", 3), {}, False),  # too many: the engine's TypeError
    ("attach_named", (), {"out": "OUT", "d": "D"}, True),
    ("attach_named", ("D",), {"out": "OUT"}, True),
    ("attach_named", ("D",), {"output": "OUT"}, False),  # not its name: its own TypeError
    ("attach_extra", ("D", "OUT", 2), {}, True),
    ("attach_extra", ("D", "OUT"), {"strict": True}, True),
    ("attach_extra", ("D",), {"output": "OUT", "stage": -1, "strict": False}, True),  # raises
    ("attach_extra", ("D", "OUT"), {}, True),  # defaults left out stay left out
    ("attach_extra", ("D", "OUT", 1, 2), {}, True),  # too many: its own TypeError
    ("attach_kwargs", ("D",), {"output": "OUT", "channel": 7, "tag": "x"}, True),
    ("attach_kwargs", ("D",), {}, True),  # output defaults to None: attach does nothing
    ("attach_kwargs", (), {"output": "OUT"}, False),  # no dict: its own TypeError
    ("extract_extra", ("DX", "OBS", 0.5, "p", "q"), {}, True),
    ("extract_extra", ("DX",), {"observer": "OBS", "timeout": 2.0}, True),
    ("extract_kwonly", ("DX",), {"observer": "OBS", "group": "g"}, True),
    ("extract_kwonly", ("DX", "OBS"), {}, False),  # observer is keyword-only: its own TypeError
]


def fresh(token: Any, out: Output, obs: Observer) -> Any:
    """The call's argument for ``token``: the same output and observer objects in both runs,
    a fresh dict holding the same tensor objects."""
    if token == "D":
        return {"next_token_ids": NAMED["a"]}
    if token == "DX":
        return {"next_token_ids": NAMED["a"], PREFIX + "a": NAMED["a"], PREFIX + "b": NAMED["b"]}
    return {"OUT": out, "OBS": obs}.get(token, token) if isinstance(token, str) else token


def run(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
        out: Output, obs: Observer) -> tuple[Any, ...]:
    """One call: (what came back or was raised, the dict's items by identity afterwards)."""
    a = tuple(fresh(x, out, obs) for x in args)
    kw = {k: fresh(v, out, obs) for k, v in kwargs.items()}
    d = a[0] if a and isinstance(a[0], dict) else kw.get("tensors")
    try:
        got: tuple[Any, ...] = ("returned", fn(*a, **kw))
    except Exception as exc:
        got = ("raised", type(exc), str(exc))
    items = [(k, id(v)) for k, v in d.items()] if isinstance(d, dict) else None
    return got, items


def canon(seen: Received) -> list[Any]:
    """The calls by identity (each run's own fresh dict as one marker)."""
    def one(v: Any) -> Any:
        return "the call's dict" if type(v) is dict else id(v)

    return [(tuple(map(one, a)), {k: one(v) for k, v in kw.items()}) for a, kw in seen.calls]


def same(bare: tuple[Any, ...], wrapped: tuple[Any, ...]) -> None:
    (b, b_items), (w, w_items) = bare, wrapped
    assert b_items == w_items
    assert b[0] == w[0]
    if b[0] == "returned":
        # The very object, or for a rebuilt dict/tuple the same contents by identity.
        assert b[1] is w[1] or (type(b[1]) is type(w[1]) and b[1] == w[1])
    else:
        assert b[1:] == w[1:]


@pytest.fixture(scope="session")
def native_dir() -> Path | str:
    """The folder holding the suite's build of the native reader (``helpers_core.
    NATIVE_CACHE``, built once a machine), or why there is none."""
    folder = Path(NATIVE_CACHE)
    saved = os.environ["PPTRACE_NATIVE_DIR"]
    os.environ["PPTRACE_NATIVE_DIR"] = str(folder)
    try:
        native.build()
    except Exception as exc:  # no compiler: tests/test_native.py is skipped for the same reason
        return f"the native reader cannot be built here: {exc}"
    finally:
        os.environ["PPTRACE_NATIVE_DIR"] = saved
    return folder


# native builds the reader (about 15 s): the slow tier
@pytest.fixture(params=["python", pytest.param("native", marks=pytest.mark.slow),
                        pytest.param("landed", marks=pytest.mark.slow)])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
           tmp_path: Path) -> Iterator[str]:
    """The Python wrapper, the C wrapper (where the native reader builds here), or the Python
    wrapper made before a build that then lands (``land``): it hands its calls to the C one."""
    if request.param != "python":
        folder = request.getfixturevalue("native_dir")
        if isinstance(folder, str):
            pytest.skip(folder)
        # landed: no build where the process looks until land() puts it there
        monkeypatch.setenv("PPTRACE_NATIVE_DIR", str(
            folder if request.param == "native" else tmp_path / "landing"))
    native._loaded = None
    yield request.param
    native._loaded = None


def land(rec: Recorder) -> bool:
    """The suite's build put where this process looks, then the recorder thread's next upkeep
    round (run here, not waited for). Whether the wrappers waited for it."""
    land_build()
    waited = bool(rec._upkeep)
    rec._run_upkeep()
    assert not rec._upkeep and rec.internal_errors == 0
    return waited


def wrap(fn: Callable[..., Any], direction: str, rec: Any) -> Any:
    return wrap_attach(fn, rec) if direction == "attach" else wrap_extract(fn, rec)


@pytest.mark.parametrize(("name", "args", "kwargs", "records"), CALLS)
def test_bare_and_wrapped_calls_agree(reader: str, name: str, args: tuple[Any, ...],
                                      kwargs: dict[str, Any], records: bool) -> None:
    seen_bare, seen_wrapped = Received(), Received()
    sglang = {"sglang_attach": (REAL.add_auxiliary_output_to_pp_tensors, "attach"),
              "sglang_extract": (REAL.pop_auxiliary_output_from_pp_tensors, "extract")}
    bare_fn, direction = {**sglang, **user_transports(seen_bare)}[name]
    user_fn = {**sglang, **user_transports(seen_wrapped)}[name][0]
    sink = ListSink()
    rec = make_recorder(sink, Config(exporters=("none",), native=reader != "python"))
    wrapped = wrap(user_fn, direction, rec)
    assert unwrap(wrapped) is user_fn
    if reader == "native" and name.startswith(("sglang", "attach_named")):
        assert type(wrapped).__name__ == "Hot"  # the C wrapper is the one under test
    if reader == "landed":
        assert type(wrapped) is types.FunctionType and handed_to(wrapped) is None
        # Those the C wrapper can take (two positional parameters first) wait for the build.
        assert land(rec) is bind(user_fn).standard
        assert unwrap(wrapped) is user_fn
        hot = handed_to(wrapped)
        assert (type(hot).__name__ == "Hot") is bind(user_fn).standard
        if name.startswith(("sglang", "attach_named")):
            assert hot is not None
    out, obs = Output(dict(NAMED)), Observer()
    bare = run(bare_fn, args, kwargs, out, obs)
    got = run(wrapped, args, kwargs, out, obs)
    same(bare, got)
    # The transport saw the very arguments, defaults left out included.
    assert canon(seen_bare) == canon(seen_wrapped) and len(seen_bare.calls) <= 1
    rec.flush()
    assert rec.internal_errors == 0
    if not records:
        assert sink.events == []  # refused by the transport's signature: nothing happened
        return
    (ev,) = sink.events
    assert ev.direction is Direction(direction)
    assert ev.ok is (bare[0][0] == "returned")
    if direction == "attach" and ev.ok and "OUT" in (*args, *kwargs.values()):
        assert ev.names == ("a", "b") and ev.keys_before == ("next_token_ids",)
    if direction == "extract":
        assert ev.names == ("a", "b")


def test_binding_reads_the_signature_once() -> None:
    from pptrace.record.binding import MISSING, Slot, bind

    def transport(tensors: Any, output: Any = None, *rest: Any, extra: Any = 1) -> None:
        pass

    slots = bind(transport)
    assert slots.tensors == Slot(0, "tensors") and slots.subject == Slot(1, "output", None)
    assert slots.standard
    assert slots.pick(({},), {}) == ({}, None)

    def varargs(*args: Any) -> None:
        pass

    assert bind(varargs).pick((1, 2, 3), {}) == (1, 2)
    assert bind(varargs).pick((1,), {}) is None
    assert bind(len).subject.default is MISSING  # a builtin: positional, no names


def test_rewrapping_a_transport_makes_no_new_wrapper_code() -> None:
    # A transport whose parameters are named otherwise gets the wrapper body's code with its
    # names, made once per (body, names): pptrace tells its own wrappers by their code, for
    # every module global it looks at when patching, so a code per wrap (as before) made every
    # later patch and restore slower with each instrument/uninstrument cycle.
    from pptrace.record import wrapper

    def put_aux(outputs: dict[str, Any], holder: Any) -> None:
        return None

    rec = make_recorder(ListSink(), Config(exporters=("none",), native=False))  # Python's
    first = wrap_attach(put_aux, rec)
    known = len(wrapper._OWN_CODES)
    again = [wrap_attach(put_aux, rec) for _ in range(50)]
    assert len(wrapper._OWN_CODES) == known
    assert all(w.__code__ is first.__code__ for w in again)
    assert all(wrapper.is_wrapped(w) for w in [first, *again])
    assert first.__code__.co_varnames[:2] == ("outputs", "holder")
