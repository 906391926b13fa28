"""The optional native metadata reader (``pptrace.record.native``): built for real, read for real.

The reader is compiled (about 20 s) with the machine's C++ compiler against the installed torch,
into the suite's shared folder, once a machine for each source, torch and Python. Then:

- it reads what the Python reads read, for every dtype torch can make here and for odd shapes,
  strides, views and devices, and it leaves to Python everything it must not read;
- wrappers using it record the same events and write the same file lines as wrappers on the
  Python reads, for the same calls (healthy, failing, odd keys, non-tensors);
- a library that is missing, garbage, or fails its self-test is not used, and the wrappers still
  record on the Python reads;
- with the reader built, the wrappers are its C wrapper (``Hot``), which takes the common case
  and hands every other one to the Python wrapper: it looks like the function it wraps, re-raises
  the engine's very exception, and contains its own failures;
- the differential parity, no-sync, recorder and reliability suites pass with the reader in use
  (run again in a subprocess that sees the build).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import pptrace.record.engine as engine
from pptrace.model import raw as R
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction
from pptrace.record import native
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output
from tests.helpers_core import NATIVE_CACHE
from tests.helpers_recorder import RANK, MemorySink, check_raw, recorder, wrapped

ROOT = Path(__file__).resolve().parent.parent
HAS_COMPILER = bool(os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++"))
pytestmark = [pytest.mark.slow,  # the reader is compiled (about 15 s) once a machine
              pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the reader")]


def _reset() -> None:
    native._loaded = None
    native._DTYPES.clear()
    native._DEVICES.clear()


@pytest.fixture(scope="session")
def built() -> Iterator[Path]:
    """The folder holding the suite's build of the reader (``helpers_core.NATIVE_CACHE``),
    built here if this machine has none for this source, torch and Python yet. A build from
    nothing, as ``pptrace run`` makes it, is ``tests/test_startup_native_build.py``'s."""
    folder = Path(NATIVE_CACHE)
    saved = os.environ["PPTRACE_NATIVE_DIR"]
    os.environ["PPTRACE_NATIVE_DIR"] = str(folder)
    try:
        native.build()
    finally:
        os.environ["PPTRACE_NATIVE_DIR"] = saved
    yield folder


@pytest.fixture
def use(built: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The reader, loaded in this process for one test."""
    monkeypatch.setenv("PPTRACE_NATIVE_DIR", str(built))
    _reset()
    reader = native.reader()
    assert reader is not None, native.status().reason
    yield reader
    _reset()


def python_meta(t: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(t.shape), t.dtype, t.device, t.is_contiguous())


def all_dtypes() -> list[torch.dtype]:
    found = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    return sorted(found, key=str)


def makeable(dtype: torch.dtype) -> torch.Tensor | None:
    with warnings.catch_warnings():  # complex32 is "experimental", quantized "deprecated"
        warnings.simplefilter("ignore")
        try:
            return torch.empty(2, 3, dtype=dtype)
        except Exception:  # a dtype torch cannot make this way here
            return None


def odd_tensors() -> list[torch.Tensor]:
    base = torch.arange(120, dtype=torch.float32).reshape(2, 3, 4, 5)
    made = [makeable(d) for d in all_dtypes()]
    return [t for t in made if t is not None] + [
        base, base.transpose(1, 3), base[:, 1:, ::2], base.expand(7, 2, 3, 4, 5),
        base.to(memory_format=torch.channels_last), base.reshape(-1)[3:], base[0, 0, 0, 0],
        torch.empty(0), torch.empty(3, 0, 2), torch.tensor(True), torch.empty(1, 1, 1, 1, 1, 1, 1),
        torch.empty(2**40, 2**20, device="meta"), torch.empty(5, device="meta").t(),
        torch.zeros(3, requires_grad=True), torch.zeros(3, requires_grad=True) * 2,
        torch.zeros(4).as_strided((2, 2), (1, 2)), torch.zeros(6)[::3],
    ]


def test_build_is_keyed_and_idempotent(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PPTRACE_NATIVE_DIR", str(built))
    path = native.library_path()
    assert path.is_file() and path.parent.name == native.build_key()
    stamp = path.stat().st_mtime_ns
    assert native.build() == path and path.stat().st_mtime_ns == stamp  # kept, not rebuilt
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind


def test_it_reads_what_python_reads(use: Any) -> None:
    tensors = odd_tensors()
    assert len(tensors) > 30
    d: dict[Any, Any] = {f"k{i}": t for i, t in enumerate(tensors)}
    got = native.decode(use.inserted(d, 0))
    assert got == [python_meta(t) for t in tensors]
    for start in (0, 1, len(tensors) - 1, len(tensors), len(tensors) + 5):
        assert native.decode(use.inserted(d, start)) == [python_meta(t) for t in tensors[start:]]


def test_its_dtypes_and_devices_are_torchs_own_objects(use: Any) -> None:
    for t in odd_tensors():
        ((_, dtype, device, _),) = native.decode(use.inserted({"x": t}, 0))
        assert dtype is t.dtype and device == t.device and str(device) == str(t.device)


class Sub(torch.Tensor):
    pass


def nested() -> torch.Tensor:
    with warnings.catch_warnings():  # "nested tensors are a prototype"
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])


NOT_PLAIN = {
    "list": lambda: [1], "None": lambda: None, "int": lambda: 3, "str": lambda: "tensor",
    "numpy": lambda: torch.zeros(2).numpy(), "Parameter": lambda: torch.nn.Parameter(
        torch.zeros(2)), "subclass": lambda: torch.zeros(2).as_subclass(Sub),
    "sparse": lambda: torch.zeros(2, 2).to_sparse(), "nested": nested,
}


@pytest.mark.parametrize("kind", list(NOT_PLAIN))
def test_it_leaves_what_is_not_a_plain_tensor_to_python(use: Any, kind: str) -> None:
    value = NOT_PLAIN[kind]()
    d = {"a": torch.zeros(1), PREFIX + "x": value}
    assert use.inserted(d, 0) is None and use.prefixed(d, PREFIX) is None
    assert use.inserted(d, 1) is None
    assert use.inserted({"a": value}, 1) == b""  # a value before start is never looked at


def test_it_reads_only_exact_dicts_and_sane_arguments(use: Any) -> None:
    class D(dict):  # type: ignore[type-arg]
        pass

    t = torch.zeros(1)
    for container in (D(x=t), {"x": t}.items(), [t], None):
        assert use.inserted(container, 0) is None
        assert use.prefixed(container, "x") is None
    assert use.inserted({"x": t}, -1) is None and use.inserted({"x": t}, True) is None
    assert use.prefixed({"x": t}, b"x") is None


class StrKey(str):
    """A str subclass key: the reader reads its characters and calls none of its methods."""


class LoudKey(str):
    def startswith(self, *args: Any) -> bool:
        raise AssertionError("user code ran")


def test_prefixed_selects_the_keys_an_extract_takes(use: Any) -> None:
    t = [torch.full((i + 1,), float(i)) for i in range(6)]
    d: dict[Any, Any] = {
        "next_token_ids": t[0], 7: t[1], PREFIX + "a": t[2], PREFIX[:-1]: torch.zeros(9),
        (PREFIX,): torch.zeros(8), LoudKey(PREFIX + "b"): t[3], PREFIX: t[4], "x" + PREFIX: t[5],
    }
    selected = [v for k, v in d.items() if isinstance(k, str) and str.startswith(k, PREFIX)]
    assert native.decode(use.prefixed(d, PREFIX)) == [python_meta(v) for v in selected]


def test_a_malformed_buffer_is_an_error_not_a_guess(use: Any) -> None:
    good = use.inserted({"x": torch.zeros(2, 3)}, 0)
    for bad in (good[:-8], good + good[:8], (5).to_bytes(8, "little")):
        with pytest.raises(ValueError):
            native.decode(bad)
    with pytest.raises(ValueError):
        use.dtype(10_000)
    with pytest.raises(ValueError):
        use.device(0, 1_000)


def record_both(calls: list[tuple[str, Any, Any]], config: Config,
                reader_on: bool) -> list[Any]:
    sink = MemorySink()
    rec = recorder(dataclasses.replace(config, native=reader_on), sink)
    attach, extract = wrapped(rec)
    assert is_c_wrapper(attach) == is_c_wrapper(extract) == reader_on
    for direction, make_d, subject in calls:
        fn = attach if direction == "attach" else extract
        try:
            fn(make_d(), subject)
        except Exception:  # the engine's errors: recorded like any other call
            pass
    rec.shutdown(5.0)
    assert rec.internal_errors == 0, rec.warn.counts
    return [e._replace(start_ns=0, mono_ns=0, duration_ns=0, thread_id=0) for e in sink.events]


def is_c_wrapper(fn: Any) -> bool:
    return type(fn).__name__ == "Hot"


def mixed_calls() -> list[tuple[str, Any, Any]]:
    # Not the 2**62-byte meta tensor: its event's byte total is beyond what a span attribute
    # holds, with or without the reader (a known limit of the file sink, counted when it hits).
    t = [x for x in odd_tensors() if x.numel() * x.element_size() < 2**40]

    def fresh(extra: dict[Any, Any]) -> Any:
        return lambda: {"next_token_ids": torch.zeros(4, dtype=torch.long), **extra}

    many = {f"t{i}": x for i, x in enumerate(t)}
    return [
        ("attach", fresh({}), Output(3)),
        ("attach", fresh({}), Output(many)),
        ("extract", fresh({PREFIX + k: v for k, v in many.items()}), Observer()),
        ("attach", fresh({}), Output({"ok": t[0], "bad": [1]})),  # error: not a tensor
        ("attach", fresh({PREFIX + "dup": t[1]}), Output({"dup": t[1]})),  # error: duplicate
        ("extract", fresh({PREFIX + "a": t[2], 7: t[3], StrKey(PREFIX + "s"): t[4]}),
         Observer()),
        ("extract", fresh({PREFIX + "a": t[2], PREFIX + "b": [1]}), Observer()),  # error
        ("extract", fresh({PREFIX + "a": t[2]}), None),  # error: no observer
        ("extract", fresh({}), Observer()),  # nothing to extract
        ("attach", fresh({}), Output({"p": torch.nn.Parameter(torch.zeros(2))})),
    ]


@pytest.mark.parametrize("mode", ["stream", "flight"])
def test_events_are_the_same_with_and_without_the_reader(use: Any, mode: str) -> None:
    config = Config(mode=mode, flight_size=64, flush_interval=3600)
    calls = mixed_calls()
    with_reader = record_both(calls, config, reader_on=True)
    without = record_both(calls, config, reader_on=False)
    assert len(with_reader) == len(calls)
    assert with_reader == without


def one_pair(sink: MemorySink) -> Recorder:
    """A recorder (not flushed yet) that has recorded one healthy attach+extract of 2 tensors."""
    rec = recorder(Config(flush_interval=3600), sink)
    attach, extract = wrapped(rec)
    d: dict[str, Any] = {"next_token_ids": torch.zeros(1)}
    attach(d, Output(2))
    extract(d, Observer())
    return rec


def test_the_buffer_holds_packed_metadata_when_the_reader_is_used(use: Any) -> None:
    sink = MemorySink()
    rec = one_pair(sink)
    assert [type(raw[R.ITEMS]) for raw in rec.buffer] == [bytes, bytes]
    off = recorder(Config(flush_interval=3600, native=False), sink)
    attach, _ = wrapped(off)
    attach({"next_token_ids": torch.zeros(1)}, Output(2))
    assert type(off.buffer[0][R.ITEMS]) is list  # PPTRACE_NATIVE=0: the Python reads
    rec.shutdown(5.0)
    off.shutdown(5.0)


def test_file_lines_are_the_same_with_and_without_the_reader(
        use: Any, tmp_path: Path) -> None:
    from pptrace.export.sinks import build_sink

    def spans(reader_on: bool) -> list[dict[str, Any]]:
        folder = tmp_path / f"native{int(reader_on)}"
        cfg = Config(trace_dir=str(folder), run_id="r", flush_interval=3600, native=reader_on)
        rec = Recorder(cfg, sink_factory=lambda rank: build_sink(cfg, rank),
                       rank_provider=lambda: (RANK, True))
        attach, extract = wrapped(rec)
        for _ in range(3):  # the second sighting of a shape makes a template: cover both
            for direction, make_d, subject in mixed_calls():
                fn = attach if direction == "attach" else extract
                try:
                    fn(make_d(), subject)
                except Exception:
                    pass
        rec.shutdown(5.0)
        out = []
        for path in sorted(folder.rglob("*.json*")):
            for line in path.read_text().splitlines():
                for rs in json.loads(line).get("resourceSpans", []):
                    for ss in rs["scopeSpans"]:
                        for span in ss["spans"]:
                            if span["name"] == "pptrace.recorder":  # stats: times, pid
                                continue
                            attrs = {a["key"]: a["value"] for a in span["attributes"]}
                            for k in ("pptrace.mono_ns", "pptrace.duration_ns",
                                      "pptrace.thread.id"):
                                attrs.pop(k, None)
                            out.append({"name": span["name"], "attrs": attrs})
        return out

    with_reader, without = spans(True), spans(False)
    assert len(with_reader) == 3 * len(mixed_calls())
    assert with_reader == without


def test_a_library_that_is_missing_or_garbage_is_not_used(
        built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PPTRACE_NATIVE_DIR", str(tmp_path))
    _reset()
    assert native.reader() is None and "not built" in native.status().reason
    native.library_path().parent.mkdir(parents=True)
    native.library_path().write_bytes(b"\x7fELF not really a library")
    _reset()
    assert native.reader() is None
    assert native.status().reason.startswith("failed to load")
    sink = MemorySink()
    one_pair(sink).shutdown(5.0)
    assert [e.names for e in sink.events] == [("t0", "t1")] * 2
    _reset()


def test_a_library_that_fails_its_self_test_is_not_used(
        built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PPTRACE_NATIVE_DIR", str(built))
    monkeypatch.setattr(native, "_probes", lambda: [torch.zeros(2, 3)] * 3)
    real_decode = native.decode
    monkeypatch.setattr(native, "decode", lambda packed, module=None: [
        (s[::-1], d, v, c) for s, d, v, c in real_decode(packed, module)])
    _reset()
    assert native.reader() is None
    assert "self-test" in native.status().reason
    _reset()


def test_status_and_build_from_the_command_line(built: Path) -> None:
    env = {**os.environ, "PPTRACE_NATIVE_DIR": str(built)}
    run = [sys.executable, "-m", "pptrace.cli.main", "native"]
    status = subprocess.run([*run, "status"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert status.returncode == 0 and "native reader: in use" in status.stdout
    again = subprocess.run([*run, "build"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and "already built" in again.stdout
    missing = subprocess.run([*run, "status"], env={**env, "PPTRACE_NATIVE_DIR": str(built / "x")},
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "run: pptrace native build" in missing.stdout
    off = subprocess.run([*run, "status"], env={**env, "PPTRACE_NATIVE": "0"},
                         capture_output=True, text=True, timeout=120)
    assert off.returncode == 1 and "PPTRACE_NATIVE=0" in off.stdout


def test_no_compiler_is_a_one_line_error(tmp_path: Path) -> None:
    env = {**os.environ, "PPTRACE_NATIVE_DIR": str(tmp_path), "CXX": str(tmp_path / "no-cxx"),
           "PATH": ""}
    proc = subprocess.run([sys.executable, "-m", "pptrace.cli.main", "native", "build"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") <= 2, proc.stderr  # the "building" line and the error
    assert proc.stderr.splitlines()[-1].startswith(
        "pptrace: error: pptrace native build: cannot run the compiler"), proc.stderr
    assert not list(tmp_path.rglob("*.so"))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_parity_and_sync_suites_pass_with_the_reader(built: Path) -> None:
    # The differential suites against SGLang's real module, again, on the native path.
    env = {**os.environ, "PPTRACE_TEST_NATIVE_DIR": str(built)}
    files = ["tests/test_parity.py", "tests/test_reliability_parity.py", "tests/test_nosync.py",
             "tests/test_reliability_leaks.py", "tests/test_recorder_stream.py",
             "tests/test_recorder_flight.py", "tests/test_recorder_rank.py",
             "tests/test_reliability_concurrency.py"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *files], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=580)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


def c_wrapped(rec: Recorder, attach: Any = None, extract: Any = None) -> tuple[Any, Any]:
    pair = wrap_transport(attach or engine.add_auxiliary_output_to_pp_tensors,
                          extract or engine.pop_auxiliary_output_from_pp_tensors, rec)
    assert all(is_c_wrapper(f) for f in pair)
    return pair


def test_the_c_wrapper_looks_like_the_function_it_wraps(use: Any) -> None:
    import inspect

    from pptrace.record.wrapper import is_wrapped, unwrap

    rec = recorder(Config(flush_interval=3600), MemorySink())
    attach, extract = c_wrapped(rec)
    for w, fn in ((attach, engine.add_auxiliary_output_to_pp_tensors),
                  (extract, engine.pop_auxiliary_output_from_pp_tensors)):
        assert is_wrapped(w) and unwrap(w) is fn and w.__wrapped__ is fn
        assert (w.__name__, w.__qualname__, w.__module__, w.__doc__) == (
            fn.__name__, fn.__qualname__, fn.__module__, fn.__doc__)
        assert inspect.signature(w) == inspect.signature(fn)
    assert wrap_transport(attach, extract, rec)[0] is not attach  # re-wrapping wraps the original
    rewrapped = wrap_transport(attach, extract, rec)[0]
    assert unwrap(rewrapped) is engine.add_auxiliary_output_to_pp_tensors

    class Holder:  # as a class attribute it binds like a function
        c_attach = attach
        py_attach = staticmethod(engine.add_auxiliary_output_to_pp_tensors)

    bound = Holder().c_attach
    assert bound.__self__.__class__ is Holder and bound.__func__ is attach
    rec.shutdown(1.0)


def test_the_c_wrapper_reraises_the_engines_very_exception(use: Any) -> None:
    sink = MemorySink()
    rec = recorder(Config(flush_interval=3600), sink)
    boom = KeyError("the engine's own")

    def attach_fn(tensors: Any, output: Any) -> Any:
        tensors["__sampling_observer_output__.half"] = torch.zeros(2)
        raise boom

    attach, _ = c_wrapped(rec, attach=attach_fn)
    d: dict[str, Any] = {"next_token_ids": torch.zeros(1)}
    with pytest.raises(KeyError) as caught:
        attach(d, Output(1))
    assert caught.value is boom
    assert caught.traceback[-1].name == "attach_fn"  # the engine's frame is where it was raised
    with pytest.raises(KeyboardInterrupt):  # a BaseException too
        c_wrapped(rec, attach=lambda t, o: (_ for _ in ()).throw(KeyboardInterrupt()))[0](
            {"x": 1}, None)
    rec.shutdown(5.0)
    first = sink.events[0]
    assert (first.error_type, first.error_message) == ("KeyError", "\"the engine's own\"")
    assert first.names == ("half",) and first.keys_after == ("next_token_ids", PREFIX + "half")
    assert sink.events[1].error_type == "KeyboardInterrupt"
    assert rec.internal_errors == 0


def test_the_c_wrapper_hands_other_cases_to_the_python_wrapper(use: Any) -> None:
    sink = MemorySink()
    rec = recorder(Config(flush_interval=3600), sink)
    attach, extract = c_wrapped(rec)

    class D(dict):  # type: ignore[type-arg]
        pass

    attach(tensors=D(next_token_ids=torch.zeros(1)), output=Output(1))  # keywords, a subclass
    d: dict[str, Any] = {"next_token_ids": torch.zeros(1)}
    attach(d, Output(2))
    extract(d, Observer())
    assert [type(raw[R.ITEMS]) for raw in rec.buffer] == [list, bytes, bytes]
    rec.enabled = False
    attach({"next_token_ids": torch.zeros(1)}, Output(1))  # disabled: straight through
    assert rec.buffered == 3
    rec.shutdown(5.0)
    assert rec.internal_errors == 0


def test_a_failure_inside_the_c_wrapper_is_counted_not_raised(use: Any) -> None:
    from pptrace.model.records import Direction

    rec = recorder(Config(flush_interval=3600), MemorySink())
    rec.seq[Direction.ATTACH] = iter(())  # no sequence number to give: recording fails
    attach, extract = c_wrapped(rec)
    d: dict[str, Any] = {"next_token_ids": torch.zeros(1)}
    out = Output(2)
    assert attach(d, out) is None
    assert list(d) == ["next_token_ids", PREFIX + "t0", PREFIX + "t1"]  # the engine's effect
    assert rec.internal_errors == 1 and "internal error in native record" in rec.warn.counts
    extract(d, Observer())
    assert rec.buffered == 1  # the extract was recorded
    rec.shutdown(5.0)


def test_the_c_wrapper_keeps_no_reference(use: Any) -> None:
    rec = recorder(Config(flush_interval=3600), MemorySink())
    attach, extract = c_wrapped(rec)
    out, obs = Output(3), Observer()
    d: dict[str, Any] = {"next_token_ids": torch.zeros(1)}
    values = list(out.named.values())
    counts = [sys.getrefcount(x) for x in (d, out, obs, *values)]
    for _ in range(200):
        attach(d, out)
        extract(d, obs)
    rec.flush()
    assert [sys.getrefcount(x) for x in (d, out, obs, *values)] == counts
    rec.shutdown(5.0)


def test_an_unwritable_build_folder_is_a_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = {**os.environ, "PPTRACE_NATIVE_DIR": str(blocker / "native")}
    proc = subprocess.run([sys.executable, "-m", "pptrace.cli.main", "native", "build"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("pptrace: error: pptrace native build: cannot write ") and \
        "PPTRACE_NATIVE_DIR" in last, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_c_wrapper_pickles_by_name_as_a_function_does(use: Any) -> None:
    import pickle
    import types

    mod = types.ModuleType("pptrace_test_pickled")
    exec("def attach(tensors, output):\n    return None\n"
         "def extract(tensors, observer):\n    return None\n", mod.__dict__)
    sys.modules[mod.__name__] = mod
    try:
        rec = recorder(Config(flush_interval=3600), MemorySink())
        py = wrap_transport(mod.attach, mod.extract, recorder(
            Config(flush_interval=3600, native=False), MemorySink()))
        attach, extract = c_wrapped(rec, attach=mod.attach, extract=mod.extract)
        for w in (attach, py[0]):  # not bound in its module yet: neither pickles
            with pytest.raises(pickle.PicklingError):
                pickle.dumps(w)
        mod.attach = attach  # as pptrace.instrument() binds it
        assert pickle.loads(pickle.dumps(attach)) is attach
        mod.attach = py[0]
        assert pickle.loads(pickle.dumps(py[0])) is py[0]
    finally:
        del sys.modules[mod.__name__]


def test_a_free_threaded_python_keeps_the_python_wrapper(
        built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sysconfig

    monkeypatch.setenv("PPTRACE_NATIVE_DIR", str(built))
    real = sysconfig.get_config_var
    monkeypatch.setattr(sysconfig, "get_config_var",
                        lambda name: 1 if name == "Py_GIL_DISABLED" else real(name))
    _reset()
    assert native.reader() is None and "free-threaded" in native.status().reason
    _reset()


def test_the_library_names_its_raw_fields_as_python_does(use: Any) -> None:
    assert use.RAW_FIELDS == R.RAW_FIELDS


def test_a_raw_layout_changed_on_one_side_only_is_refused(
        use: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # As if a field were added to pptrace.model.raw and not to native_meta.cpp.
    monkeypatch.setattr(native, "RAW_FIELDS", (*R.RAW_FIELDS, "new_field"))
    assert native._self_test(use).startswith("the library's raw layout")
    _reset()
    assert native.reader() is None and "raw layout" in native.status().reason


def test_the_c_wrapper_builds_raws_of_the_layout(use: Any) -> None:
    rec = recorder(Config(flush_interval=3600), MemorySink())
    attach, extract = c_wrapped(rec)
    d: dict[str, Any] = {"next_token_ids": torch.zeros(1)}
    attach(d, Output(2))
    extract(d, Observer())
    keys = ("next_token_ids", PREFIX + "t0", PREFIX + "t1")
    first, second = rec.buffer
    assert type(first[R.ITEMS]) is bytes and type(second[R.ITEMS]) is bytes  # the C path's
    check_raw(first, Direction.ATTACH, Output, keys[:1], keys, False)
    check_raw(second, Direction.EXTRACT, Observer, keys, keys[:1], False)
    rec.shutdown(5.0)


def test_the_c_wrapper_held_after_shutdown_passes_through_and_keeps_nothing(use: Any) -> None:
    import tracemalloc

    rec = recorder(Config(flush_interval=3600), MemorySink())
    attach, extract = c_wrapped(rec)
    out, obs, ids = Output(2), Observer(), torch.zeros(1)
    rec.shutdown(2.0)
    recorded = rec.recorded
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for _ in range(100_000):
            d: dict[str, Any] = {"next_token_ids": ids}
            attach(d, out)
            extract(d, obs)
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert rec.buffered == 0 and rec.recorded == recorded == 0
    assert grown < 256 * 1024, grown


def test_a_call_inside_which_shutdown_ran_is_left_out_c_wrapper(use: Any) -> None:
    from tests.test_reliability_final import check_left_out, shutdown_during_the_call

    rec = recorder(Config(flush_interval=3600), MemorySink())
    attach, _ = c_wrapped(rec, attach=shutdown_during_the_call(rec))
    check_left_out(rec, attach)
