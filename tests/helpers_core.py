"""Shared pieces for the core's tests: user objects that log every call made into them, a value
pool shared by side-by-side runs, in-memory sinks, and the four transports under comparison.

    log = CallLog()
    tensors = make_container("logging_dict", [("next_token_ids", ids)], log)
    outcome = run_call(attach, tensors, Output(log, ...), log)

Every fake logs ``(who, what, detail)`` tuples where ``detail`` names keys by value and values by
``id()``: the side-by-side runs share the same value objects, so two runs that made the same calls
with the same arguments produce equal logs.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import types
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pptrace.model.config import Config
from pptrace.model.records import Event, RankInfo, RecorderStats
from pptrace.record.recorder import Recorder

# The native reader's builds for the suite: keyed by everything the binary depends on
# (pptrace.record.native.build_key), so a build here is reused by every test and later session
# on this machine that needs the same one (about 15 s each), never by another source or torch.
NATIVE_CACHE = os.path.join(tempfile.gettempdir(), f"pptrace-tests-native-{os.getuid()}")


def scratch(prefix: str) -> str:
    """A new folder under the temporary directory, removed when this process exits: for the
    traces a cached helper makes once a session (pytest's ``tmp_path`` is a test's own)."""
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def land_build(content: bytes | None = None) -> Path:
    """Put the suite's build of the native reader (or ``content``) where this process looks for
    it (``PPTRACE_NATIVE_DIR``), renamed into place as ``native.build`` writes it: a build that
    lands while the process runs."""
    from pptrace.record import native

    path = native.library_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(".part")
    if content is None:
        shutil.copyfile(Path(NATIVE_CACHE) / path.parent.name / path.name, part)
    else:
        part.write_bytes(content)
    os.replace(part, path)  # whole or not at all
    return path


def handed_to(wrapper: Any) -> Any:
    """What a Python wrapper hands its calls to (``native_hot``; None: it records them)."""
    cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__ or (), strict=True))
    return cells["native_hot"].cell_contents

__all__ = [
    "RANK",
    "CallLog",
    "Capture",
    "LoggingStr",
    "ListSink",
    "Outcome",
    "TeeSink",
    "make_recorder",
    "real_module",
    "render_key",
    "scratch",
    "value_pool",
]

RANK = RankInfo(rank=3, world_size=4, pp_rank=3, pp_size=4, tp_rank=0, tp_size=1,
                host="testhost", pid=os.getpid())


def real_module() -> types.ModuleType:
    """SGLang's real transport module; fails (never skips) when it cannot be loaded."""
    from pptrace.engines.sglang_load import load_transport_module

    mod = load_transport_module(allow_bare=True)
    if mod is None:
        raise RuntimeError(
            "SGLang's transport module is not installed: run "
            "`pip install --no-deps -r tests/engines.txt` (the parity tests must never skip)"
        )
    return mod


def render_key(key: object) -> str:
    """How the recorder renders a dict key: the text of a str, else its repr."""
    return key if isinstance(key, str) else repr(key)


# --- the call log ------------------------------------------------------------------------------


class CallLog:
    """An ordered list of calls into user objects."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *entry: Any) -> None:
        self.calls.append(entry)


def _ids(values: Sequence[Any]) -> tuple[int, ...]:
    return tuple(id(v) for v in values)


class LoggingDict(dict):  # type: ignore[type-arg]
    """A dict subclass that logs every dict method called on it (by the engine or anyone)."""

    def __init__(self, log: CallLog, pairs: Sequence[tuple[Any, Any]]) -> None:
        super().__init__(pairs)  # dict.__init__ does not go through __setitem__
        self._log = log

    def __getitem__(self, key: Any) -> Any:
        self._log("dict", "__getitem__", key)
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._log("dict", "__setitem__", key, id(value))
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._log("dict", "__delitem__", key)
        super().__delitem__(key)

    def __contains__(self, key: object) -> bool:
        self._log("dict", "__contains__", key)
        return super().__contains__(key)

    def __iter__(self) -> Iterator[Any]:
        self._log("dict", "__iter__")
        return super().__iter__()

    def __len__(self) -> int:
        self._log("dict", "__len__")
        return super().__len__()

    def keys(self) -> Any:
        self._log("dict", "keys")
        return super().keys()

    def items(self) -> Any:
        self._log("dict", "items")
        return super().items()

    def values(self) -> Any:
        self._log("dict", "values")
        return super().values()

    def get(self, key: Any, default: Any = None) -> Any:
        self._log("dict", "get", key)
        return super().get(key, default)

    def pop(self, key: Any, *default: Any) -> Any:
        self._log("dict", "pop", key)
        return super().pop(key, *default)

    def storage(self) -> list[tuple[Any, Any]]:
        """The pairs as stored, read without logging."""
        return list(dict.items(self))


class LoggingMutableMapping(MutableMapping[Any, Any]):
    """A mutable mapping that is not a dict, logging every call made into it."""

    def __init__(self, log: CallLog, pairs: Sequence[tuple[Any, Any]]) -> None:
        self._data = dict(pairs)
        self._log = log

    def __getitem__(self, key: Any) -> Any:
        self._log("mapping", "__getitem__", key)
        return self._data[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._log("mapping", "__setitem__", key, id(value))
        self._data[key] = value

    def __delitem__(self, key: Any) -> None:
        self._log("mapping", "__delitem__", key)
        del self._data[key]

    def __contains__(self, key: object) -> bool:
        self._log("mapping", "__contains__", key)
        return key in self._data

    def __iter__(self) -> Iterator[Any]:
        self._log("mapping", "__iter__")
        return iter(list(self._data))

    def __len__(self) -> int:
        self._log("mapping", "__len__")
        return len(self._data)

    def items(self) -> Any:
        self._log("mapping", "items")
        return super().items()

    def storage(self) -> list[tuple[Any, Any]]:
        return list(self._data.items())


class LoggingMapping(Mapping[Any, Any]):
    """What ``to_pp_tensors`` may return: a read-only mapping that logs calls and may even
    repeat a name (a broken mapping the engine must still handle the same way)."""

    def __init__(self, log: CallLog, pairs: Sequence[tuple[Any, Any]]) -> None:
        self._pairs = list(pairs)
        self._log = log

    def __getitem__(self, key: Any) -> Any:
        self._log("named", "__getitem__", key)
        for k, v in self._pairs:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        self._log("named", "__iter__")
        return iter([k for k, _ in self._pairs])

    def __len__(self) -> int:
        self._log("named", "__len__")
        return len(self._pairs)

    def __contains__(self, key: object) -> bool:
        self._log("named", "__contains__", key)
        return any(k == key for k, _ in self._pairs)

    def items(self) -> Any:
        self._log("named", "items")
        return super().items()

    def keys(self) -> Any:
        self._log("named", "keys")
        return super().keys()

    def values(self) -> Any:
        self._log("named", "values")
        return super().values()


_CURRENT: list[CallLog] = [CallLog()]  # the log of the run in progress (for shared key objects)


class LoggingStr(str):
    """A str subclass key whose own string methods log (the engine calls them; pptrace must not)."""

    __slots__ = ()

    def startswith(self, *args: Any) -> bool:  # type: ignore[override]
        _CURRENT[0]("key", "startswith", str(self))
        return str.startswith(self, *args)

    def removeprefix(self, prefix: str) -> str:
        _CURRENT[0]("key", "removeprefix", str(self))
        return str.removeprefix(self, prefix)


def make_container(kind: str, pairs: Sequence[tuple[Any, Any]], log: CallLog) -> Any:
    """The ``tensors`` argument: a plain dict, a logging dict subclass, or a non-dict mapping."""
    if kind == "dict":
        return dict(pairs)
    if kind == "logging_dict":
        return LoggingDict(log, pairs)
    if kind == "mutable_mapping":
        return LoggingMutableMapping(log, pairs)
    raise ValueError(kind)


def storage(container: Any) -> list[tuple[Any, Any]]:
    """The container's pairs, read without calling into it."""
    if type(container) is dict:
        return list(container.items())
    return container.storage()  # type: ignore[no-any-return]


# --- auxiliary outputs -------------------------------------------------------------------------


def make_named(log: CallLog, kind: str, pairs: Sequence[tuple[Any, Any]]) -> Any:
    """What ``to_pp_tensors`` returns: a dict, a logging mapping, None, or a list of pairs."""
    if kind == "dict":
        return dict(pairs)
    if kind == "mapping":
        return LoggingMapping(log, pairs)
    if kind == "none":
        return None
    if kind == "list":
        return list(pairs)
    raise ValueError(kind)


class Output:
    """A PP-capable output; ``to_pp_tensors`` logs, then returns a fresh mapping (or raises)."""

    def __init__(self, log: CallLog, make: Callable[[], Any], exc: BaseException | None = None):
        self._log, self._make, self._exc = log, make, exc

    def to_pp_tensors(self) -> Any:
        self._log("output", "to_pp_tensors")
        if self._exc is not None:
            raise self._exc
        return self._make()


class BlockedOutput:
    """``to_pp_tensors = None`` blocks the protocol (typing's documented opt-out)."""

    to_pp_tensors = None


class BlockedObserver:
    """``from_pp_tensors = None`` blocks the protocol."""

    from_pp_tensors = None


class Anything:
    """An object whose ``__getattr__`` answers every missing attribute with a logging callable."""

    def __init__(self, log: CallLog, result: Callable[[], Any]) -> None:
        self._log, self._result = log, result

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        self._log("anything", "__getattr__", name)

        def method(*args: Any) -> Any:
            self._log("anything", "call", name, *(_describe(a) for a in args))
            return self._result()

        return method


def _describe(mapping: Any) -> Any:
    if isinstance(mapping, dict):
        return (type(mapping).__name__, tuple(dict.keys(mapping)), _ids(list(dict.values(mapping))))
    return type(mapping).__name__


class ObserverError(Exception):
    """What a failing observer raises."""


class Observer:
    """A PP-capable observer. ``behaviour``: return, none, raise, pop (drops the first name it
    received before returning), add (adds a name), clear."""

    def __init__(self, log: CallLog, behaviour: str, result: Any, exc: BaseException) -> None:
        self._log, self.behaviour, self.result, self.exc = log, behaviour, result, exc
        self.received: list[Any] = []

    def from_pp_tensors(self, tensors: Any) -> Any:
        self._log("observer", "from_pp_tensors", _describe(tensors))
        self.received.append(tensors)
        if self.behaviour == "raise":
            raise self.exc
        if self.behaviour == "pop" and tensors:
            tensors.pop(next(iter(tensors)))
        elif self.behaviour == "add":
            tensors["added_by_observer"] = self.result
        elif self.behaviour == "clear":
            tensors.clear()
        return None if self.behaviour == "none" else self.result


# --- shared values -----------------------------------------------------------------------------


class LoggingTensor(torch.Tensor):
    """A tensor subclass whose ``__torch_function__`` (user code) logs every call into it."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        _CURRENT[0]("tensor", "__torch_function__", getattr(func, "__name__", repr(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


class AnythingValue:
    """A dict value whose ``__getattr__`` answers anything (logging to the run in progress)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        _CURRENT[0]("value", "__getattr__", name)
        return lambda *args: None


def value_pool() -> dict[str, Any]:
    """Values shared by all side-by-side runs of one example (compared by identity)."""
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {
        "t_f32": torch.zeros(2, 3),
        "t_i64": torch.arange(4),
        "t_0d": torch.tensor(1.5),
        "t_noncontig": base.t(),
        "t_empty": torch.empty(0, 5, dtype=torch.float16),
        "t_bool": torch.ones(3, 1, dtype=torch.bool),
        "t_subclass": torch.zeros(2, 2).as_subclass(LoggingTensor),
        "list": [1, 2, 3],
        "ndarray": np.zeros(3, dtype=np.float32),
        "int": 7,
        "none": None,
        "str": "output",
        "anything": AnythingValue(),
    }


TENSOR_KINDS = ("t_f32", "t_i64", "t_0d", "t_noncontig", "t_empty", "t_bool", "t_subclass")
VALUE_KINDS = TENSOR_KINDS + ("list", "ndarray", "int", "none", "str", "anything")


# --- running one call --------------------------------------------------------------------------


@dataclass
class Outcome:
    """Everything the engine could observe of one call."""

    result: Any
    exc: BaseException | None
    keys: list[Any]
    value_ids: list[int]
    calls: list[tuple[Any, ...]]
    received: list[Any] = field(default_factory=list)  # what the observer holds afterwards

    def error(self) -> tuple[type, str] | None:
        return None if self.exc is None else (type(self.exc), str(self.exc))


def run_call(fn: Callable[..., Any], container: Any, subject: Any, log: CallLog) -> Outcome:
    """Call ``fn(container, subject)`` and capture everything observable, without calling in."""
    log.calls.clear()
    _CURRENT[0] = log
    try:
        result, exc = fn(container, subject), None
    except BaseException as e:  # noqa: BLE001 - the outcome under comparison
        result, exc = None, e
    calls = list(log.calls)
    pairs = storage(container)
    received = []
    if isinstance(subject, Observer):
        received = [(tuple(dict.keys(r)), _ids(list(dict.values(r)))) for r in subject.received]
    return Outcome(result, exc, [k for k, _ in pairs], _ids([v for _, v in pairs]), calls,
                   received)


class Capture:
    """Wraps a transport function to remember the exact result or exception it produced."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fn)  # the engine's name, as the wrapper copies it
        self.fn = fn
        self.result: Any = None
        self.exc: BaseException | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # As the call came (a wrapper passes its arguments through as they came, so a malformed
        # call reaches the engine's function and fails with its own TypeError).
        self.result, self.exc = None, None
        try:
            self.result = self.fn(*args, **kwargs)
        except BaseException as e:
            self.exc = e
            raise
        return self.result


# --- sinks and recorders -----------------------------------------------------------------------


class ListSink:
    """A recorder sink that keeps events and stats in memory."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.stats: list[RecorderStats] = []

    def export(self, events: Sequence[Event]) -> None:
        self.events.extend(events)

    def export_stats(self, stats: RecorderStats) -> None:
        self.stats.append(stats)

    def shutdown(self, timeout: float) -> None:
        pass


class TeeSink(ListSink):
    """Keeps what it is given and forwards it to another sink (to compare spans with events)."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner

    def export(self, events: Sequence[Event]) -> None:
        super().export(events)
        self.inner.export(events)

    def export_stats(self, stats: RecorderStats) -> None:
        super().export_stats(stats)
        self.inner.export_stats(stats)

    def shutdown(self, timeout: float) -> None:
        self.inner.shutdown(timeout)


def make_recorder(sink: Any, config: Config | None = None, rank: RankInfo = RANK) -> Recorder:
    """A recorder with a fixed rank and the given sink; no background thread (call ``flush``)."""
    return Recorder(config or Config(exporters=("none",)), sink_factory=lambda _rank: sink,
                    rank_provider=lambda: (rank, True))
