"""SGLang 0.5.23's own scheduler, traced: the wheel's ``scheduler_pp_mixin`` methods run for real.

The engine calls the transport in two places, both in ``SchedulerPPMixin``: the last stage's
``_pp_prepare_tensor_dict`` builds its output dict and attaches (every PP loop sends what it
returns), and stage 0's ``_pp_prep_batch_result`` extracts (reached from the plain,
disaggregated-prefill and disaggregated-decode loops and the NPU pp=2 receive path). Here both
methods run from the installed wheel, on a minimal scheduler object, with the mixin's other
imports replaced by ``sys.modules`` stubs and the transport module real, under each start-up
route: ``pptrace.instrument()`` before and after the mixin's import, ``pptrace run`` and
``opentelemetry-instrument``, on the C wrapper and on the Python one. Each route checks that the
mixin's globals hold pptrace's wrappers, that the calls made through the methods are recorded
(direction, names, shapes, dtypes), and that uninstrumenting gives the mixin the engine's very
functions back.

The first part (the engine, stubbed) imports only the standard library and torch at its top
(pptrace's public ``is_wrapped``/``unwrap`` inside the functions that report bindings), so that
the child processes of the subprocess routes run exactly the same engine code.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

MIXIN = "sglang.srt.managers.scheduler_pp_mixin"
TRANSPORT = "sglang.srt.sampling.sampling_observer_pp"
NAMES = ("add_auxiliary_output_to_pp_tensors", "pop_auxiliary_output_from_pp_tensors")
STEPS = 2

# --- the engine, stubbed (the child processes import this part) ------------------------------


def sglang_folder() -> Path:
    """The installed wheel's package folder (``import sglang`` itself needs its GPU stack)."""
    spec = importlib.util.find_spec("sglang") if "sglang" not in sys.modules else None
    locations = (spec.submodule_search_locations if spec is not None
                 else sys.modules["sglang"].__path__)
    assert locations, ("SGLang's wheel must be installed "
                       "(pip install --no-deps -r tests/engines.txt)")
    return Path(list(locations)[0])


def register_bare_sglang() -> None:
    """A bare ``sglang`` package pointing at the wheel, unless one is registered already."""
    if "sglang" not in sys.modules:
        bare = types.ModuleType("sglang")
        bare.__path__ = [str(sglang_folder())]
        sys.modules["sglang"] = bare


class Made:
    """Stands in for an engine class the two methods build: keeps what it was given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        vars(self).update(kwargs)

    def copy_auxiliary_output_to_cpu(self) -> None:  # GenerationBatchResult's, at stage 0's end
        self.copied_to_cpu = True


# The names whose behaviour the module itself needs at import time; every other one is a class.
_BEHAVIOUR: dict[str, Callable[..., Any]] = {
    "DynamicGradMode": lambda: (lambda fn: fn),  # decorates the event loops
    "is_npu": lambda: False,
}


def stub_modules() -> dict[str, types.ModuleType]:
    """A stub for each module the mixin imports from at its top, the transport module aside."""
    tree = ast.parse((sglang_folder() / "srt" / "managers" / "scheduler_pp_mixin.py").read_text())
    stubs: dict[str, types.ModuleType] = {}
    transport_names: list[str] = []
    for node in tree.body:  # top level only: the TYPE_CHECKING block never runs
        if not (isinstance(node, ast.ImportFrom) and node.module and
                node.module.startswith("sglang.")):
            continue
        if node.module == TRANSPORT:
            transport_names += [alias.name for alias in node.names]
            continue
        mod = stubs.setdefault(node.module, types.ModuleType(node.module))
        for alias in node.names:
            setattr(mod, alias.name, _BEHAVIOUR.get(alias.name) or type(alias.name, (Made,), {}))
    # The premise of every test here: the mixin binds the transport's two functions by name.
    assert sorted(transport_names) == sorted(NAMES), transport_names
    return stubs


def import_mixin() -> types.ModuleType:
    """Import the wheel's mixin with its other imports stubbed (its transport import is real)."""
    register_bare_sglang()
    for name, mod in stub_modules().items():
        sys.modules.setdefault(name, mod)
    return importlib.import_module(MIXIN)


class AuxOutput:
    """The sampling observer's device output: PP-capable."""

    def __init__(self, named: dict[str, torch.Tensor]) -> None:
        self.named = named

    def to_pp_tensors(self) -> dict[str, torch.Tensor]:
        return self.named


class PPObserver:
    """Stage 0's sampling observer: rebuilds an output from what it received."""

    def from_pp_tensors(self, tensors: Any) -> AuxOutput:
        return AuxOutput(dict(tensors))


class ProxyTensors:
    """What the PP receive hands stage 0 (``PPProxyTensors``): a dict behind ``tensors``."""

    def __init__(self, tensors: dict[str, Any]) -> None:
        self.tensors = tensors

    def __getitem__(self, key: str) -> Any:
        return self.tensors[key]


def scheduler(mixin: types.ModuleType, *, first: bool) -> Any:
    """A scheduler with just what the two methods read: a subclass of the real mixin."""
    ns = types.SimpleNamespace
    stashed: list[Any] = []
    sched = type("Scheduler", (mixin.SchedulerPPMixin,), {})()
    sched.pp_group = ns(is_first_rank=first)
    sched.tp_worker = ns(model_runner=ns(sampling_observer=PPObserver() if first else None))
    sched.future_map = ns(stash=lambda indices, payload: stashed.append(payload), stashed=stashed)
    return sched


def aux_tensors(step: int) -> dict[str, torch.Tensor]:
    return {"scores": torch.full((2, 3), float(step)),
            "ids": torch.tensor([step, step + 1], dtype=torch.int64)}


def batch() -> Any:
    """A decode batch: no logprobs, no speculative decoding."""
    return types.SimpleNamespace(
        return_logprob=False, spec_algorithm=types.SimpleNamespace(is_dspark=lambda: False),
        req_pool_indices=torch.tensor([0, 1]), input_ids=torch.tensor([7, 8]),
        contains_last_prefill_chunk=False)


def run_ring(mixin: types.ModuleType, steps: int = STEPS) -> list[dict[str, Any]]:
    """Each step: the last stage prepares its dict, the send tags it, stage 0 preps the result."""
    last, first = scheduler(mixin, first=False), scheduler(mixin, first=True)
    seen = []
    for step in range(steps):
        result = types.SimpleNamespace(
            next_token_ids=torch.tensor([step, step + 1]), accept_lens=None,
            next_draft_input=None, logits_output=types.SimpleNamespace(
                auxiliary_device_output=AuxOutput(aux_tensors(step)), sampling_mask_output=None))
        tensor_dict = last._pp_prepare_tensor_dict(result, batch())
        sent = list(tensor_dict)
        tensor_dict["__msg_type__"] = "output"  # as _pp_send_dict_to_next_stage does
        out = first._pp_prep_batch_result(batch(), mixin.PPBatchMetadata(
            can_run_cuda_graph=False), ProxyTensors(tensor_dict))
        aux = out.logits_output.auxiliary_device_output.named
        seen.append({"sent": sent, "left": list(tensor_dict), "aux": sorted(aux),
                     "equal": all(torch.equal(aux[k], v) for k, v in aux_tensors(step).items()),
                     "copied": out.copied_to_cpu})
    return seen


def expected_ring(steps: int = STEPS) -> list[dict[str, Any]]:
    prefix = "__sampling_observer_output__."
    return [{"sent": ["next_token_ids", prefix + "scores", prefix + "ids"],
             "left": ["next_token_ids", "__msg_type__"], "aux": ["ids", "scores"],
             "equal": True, "copied": True}] * steps


def wrapper_kind(fn: Any) -> str:
    """"c" (the native reader's ``Hot``), "python" (a pptrace function) or "engine"."""
    from pptrace.record.wrapper import is_wrapped

    if not is_wrapped(fn):
        return "engine"
    return "c" if type(fn).__module__ == "pptrace_meta" else "python"


def bindings(mixin: types.ModuleType) -> dict[str, Any]:
    """Where the mixin's two names point: the wrapper's kind, and what it wraps."""
    from pptrace.record.wrapper import unwrap

    transport = sys.modules[TRANSPORT]
    out: dict[str, Any] = {}
    for name in NAMES:
        fn = vars(mixin)[name]
        inner = unwrap(fn)
        out[name] = {"kind": wrapper_kind(fn), "same_as_transport": fn is vars(transport)[name],
                     "wraps": f"{inner.__module__}.{inner.__qualname__}",
                     "file": Path(inner.__code__.co_filename).name}
    return out


def engine_bindings() -> dict[str, Any]:
    return {name: {"kind": "engine", "same_as_transport": True, "wraps": f"{TRANSPORT}.{name}",
                   "file": "sampling_observer_pp.py"} for name in NAMES}


def wrapped_bindings(kind: str) -> dict[str, Any]:
    return {name: {**value, "kind": kind} for name, value in engine_bindings().items()}


# The child of the subprocess routes: the engine code above, and what it saw as one JSON line.
CHILD = """
import json, sys
from pptrace.record.wrapper import is_wrapped, unwrap
from tests.test_sglang_scheduler import bindings, import_mixin, run_ring, NAMES

mixin = import_mixin()  # the transport module loads here, as the mixin's own import
report = {{"bound": bindings(mixin), "ring": run_ring(mixin)}}
originals = {{name: unwrap(vars(mixin)[name]) for name in NAMES if is_wrapped(vars(mixin)[name])}}
{uninstrument}
report["restored"] = bindings(mixin)
report["very"] = sorted(n for n, fn in originals.items() if vars(mixin)[n] is fn)
print("REPORT " + json.dumps(report))
"""
UNINSTRUMENT = {
    "pptrace-run": "import pptrace; pptrace.uninstrument()",
    "opentelemetry-instrument": "from pptrace.activation.otel_instrumentor import "
                                "PptraceInstrumentor; PptraceInstrumentor().uninstrument()",
}

# --- the tests ---------------------------------------------------------------------------------

import pytest  # noqa: E402  (below the engine part, which the children import without pytest)

import pptrace  # noqa: E402
from pptrace.load.loader import load_paths  # noqa: E402
from pptrace.model.config import Config  # noqa: E402
from pptrace.model.records import Direction, Event  # noqa: E402
from pptrace.record import native  # noqa: E402
from pptrace.record.wrapper import unwrap  # noqa: E402
from tests.helpers_core import NATIVE_CACHE  # noqa: E402
from tests.helpers_startup import PYTHON, REPO, child_env, real_module, run_pptrace  # noqa: E402

HAS_COMPILER = bool(os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++"))
OTEL_INSTRUMENT = Path(PYTHON).parent / "opentelemetry-instrument"


def _reset_native() -> None:
    native._loaded = None
    native._DTYPES.clear()
    native._DEVICES.clear()


@pytest.fixture(scope="module")
def built() -> Path:
    """The suite's build of the native reader (the C wrapper needs it; about 15 s, once a
    machine: ``helpers_core.NATIVE_CACHE``)."""
    if not HAS_COMPILER:
        pytest.skip("no C++ compiler to build the native reader (the C wrapper needs it)")
    folder = Path(NATIVE_CACHE)
    saved = os.environ["PPTRACE_NATIVE_DIR"]
    os.environ["PPTRACE_NATIVE_DIR"] = str(folder)
    try:
        native.build()
    finally:
        os.environ["PPTRACE_NATIVE_DIR"] = saved
    return folder


# c builds the reader (about 15 s): the slow tier
@pytest.fixture(params=["python", pytest.param("c", marks=pytest.mark.slow)])
def wrapper(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Which wrapper the process builds: the Python one, or the native reader's C wrapper."""
    if request.param == "c":
        monkeypatch.setenv("PPTRACE_NATIVE_DIR", str(request.getfixturevalue("built")))
    _reset_native()
    yield request.param
    _reset_native()


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], types.ModuleType]]:
    """Import the mixin (stubs in ``sys.modules`` for this test only); never left instrumented."""
    real_module()  # the bare package and the real transport, as the other tests share them
    for name, mod in stub_modules().items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delitem(sys.modules, MIXIN, raising=False)
    yield import_mixin
    pptrace.uninstrument()
    sys.modules.pop(MIXIN, None)
    vars(sys.modules["sglang.srt.managers"]).pop("scheduler_pp_mixin", None)


def _events(trace_dir: Path) -> list[tuple[Any, ...]]:
    trace = load_paths([str(trace_dir)])
    assert len(trace.processes) == 1, trace.sources
    return [_summary(ev) for ev in trace.processes[0].events]


def _summary(ev: Event) -> tuple[Any, ...]:
    return (ev.direction, ev.seq, ev.error_type, [(t.name, t.shape, t.dtype) for t in ev.tensors])


def _expected_events(steps: int = STEPS) -> list[tuple[Any, ...]]:
    tensors = [("scores", (2, 3), "float32"), ("ids", (2,), "int64")]
    return [(direction, step, None, tensors) for step in range(steps)
            for direction in (Direction.ATTACH, Direction.EXTRACT)]


def test_the_stubs_leave_the_transport_real_and_the_mixin_the_wheels(
    engine: Callable[[], types.ModuleType],
) -> None:
    mixin = engine()
    assert Path(mixin.__file__ or "") == sglang_folder() / "srt/managers/scheduler_pp_mixin.py"
    assert bindings(mixin) == engine_bindings()
    assert isinstance(sys.modules["sglang.srt.managers.utils"], types.ModuleType)
    assert not hasattr(sys.modules[TRANSPORT], "__path__")  # a real module, not a stub
    assert sys.modules[TRANSPORT].__file__.endswith("sampling_observer_pp.py")
    assert run_ring(mixin) == expected_ring()  # the engine's own behaviour, untraced


@pytest.mark.parametrize("when", ["before", "after"])
def test_instrument_before_or_after_the_mixin_import_traces_its_two_call_sites(
    engine: Callable[[], types.ModuleType], wrapper: str, when: str, tmp_path: Path,
) -> None:
    config = Config(trace_dir=str(tmp_path / "traces"), native=wrapper == "c")
    engine_functions = {name: vars(sys.modules[TRANSPORT])[name] for name in NAMES}
    assert [wrapper_kind(fn) for fn in engine_functions.values()] == ["engine", "engine"]
    if when == "before":
        pptrace.instrument(config)
        mixin = engine()
    else:
        mixin = engine()
        assert bindings(mixin) == engine_bindings()
        pptrace.instrument(config)
    assert bindings(mixin) == wrapped_bindings(wrapper)
    assert all(unwrap(vars(mixin)[name]) is engine_functions[name] for name in NAMES)
    assert run_ring(mixin) == expected_ring()  # traced, the engine sees exactly the same
    pptrace.uninstrument()
    assert bindings(mixin) == engine_bindings()
    assert all(vars(mixin)[name] is engine_functions[name] for name in NAMES)  # the very ones
    assert _events(tmp_path / "traces") == _expected_events()


@pytest.mark.slow
@pytest.mark.parametrize("route", ["pptrace-run", "opentelemetry-instrument"])
def test_a_process_started_traced_binds_the_wrappers_into_the_mixin_at_its_import(
    route: str, wrapper: str, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    script = tmp_path / "scheduler.py"
    script.write_text(CHILD.format(uninstrument=UNINSTRUMENT[route]))
    traces = tmp_path / "traces"
    reader = ({"PPTRACE_NATIVE_DIR": str(request.getfixturevalue("built"))} if wrapper == "c"
              else {"PPTRACE_NATIVE": "0"})
    env = child_env(PYTHONPATH=str(REPO), **reader)
    if route == "pptrace-run":
        proc = run_pptrace(["--dir", str(traces), "--", PYTHON, str(script)], env, tmp_path)
    else:
        assert OTEL_INSTRUMENT.exists(), "opentelemetry-instrumentation must be installed (dev)"
        env.update(PPTRACE_DIR=str(traces), PPTRACE_EXPORT="file", OTEL_TRACES_EXPORTER="none",
                   OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
        proc = subprocess.run([str(OTEL_INSTRUMENT), PYTHON, str(script)], env=env,
                              cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    report = json.loads(line.removeprefix("REPORT "))
    assert report["bound"] == wrapped_bindings(wrapper), proc.stderr
    assert report["ring"] == expected_ring()
    assert report["restored"] == engine_bindings()
    assert report["very"] == sorted(NAMES)
    assert _events(traces) == _expected_events()
