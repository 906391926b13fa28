"""Targets: a transport module of one's own, with renamed functions, is traced with the guarantees
SGLang's module has (every by-name importer patched, before and after its import; exact restore;
never wrapped twice); a bad target is one line and no tracing, never an engine failure."""

from __future__ import annotations

import importlib
import itertools
import logging
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import pptrace
from pptrace.activation.hook import ImportHook
from pptrace.activation.patch import EnginePatch
from pptrace.activation.startup import active_recorder
from pptrace.engines.sglang_load import ATTACH, EXTRACT
from pptrace.model.config import Config
from pptrace.model.errors import ConfigError
from pptrace.model.target import (
    DEFAULT_MODULE,
    DEFAULT_TARGETS,
    Target,
    as_targets,
    format_targets,
    parse_target,
    parse_targets,
)
from pptrace.record.wrapper import is_wrapped, unwrap
from tests.doubles import Observer
from tests.helpers_startup import real_module, sample_output

QUIET = Config(exporters=("none",), flush_interval=0.05)
_names = itertools.count()

# A transport of one's own: the same contract as SGLang's, under other function names.
OWN_TRANSPORT = '''"""A vendored transport whose functions are renamed."""
PREFIX = "__sampling_observer_output__."
NOT_A_FUNCTION = 3


def send_aux(tensors, output):
    if output is None:
        return None
    for name, value in output.to_pp_tensors().items():
        tensors[PREFIX + name] = value
    return None


def recv_aux(tensors, observer):
    got = {k[len(PREFIX):]: v for k, v in tensors.items() if k.startswith(PREFIX)}
    if not got:
        return None
    out = observer.from_pp_tensors(got)
    for key in [k for k in tensors if k.startswith(PREFIX)]:
        del tensors[key]
    return out
'''

# What the engine's scheduler does: bind the two functions by name, one under an alias.
CONSUMER = '''from {module} import send_aux, recv_aux
from {module} import recv_aux as receive_alias


def step(tensors, output, observer):
    send_aux(tensors, output)
    return receive_alias(tensors, observer)
'''


class Own:
    """A fresh transport module and consumer, written in a temporary folder (unique names)."""

    def __init__(self, folder: Path) -> None:
        n = next(_names)
        self.name, self.consumer_name = f"own_transport_{n}", f"own_consumer_{n}"
        (folder / f"{self.name}.py").write_text(OWN_TRANSPORT)
        (folder / f"{self.consumer_name}.py").write_text(CONSUMER.format(module=self.name))
        self.spec = f"{self.name}:send_aux,recv_aux"

    def transport(self) -> types.ModuleType:
        return importlib.import_module(self.name)

    def consumer(self) -> types.ModuleType:
        return importlib.import_module(self.consumer_name)


@pytest.fixture
def own(tmp_path: Path) -> Iterator[Own]:
    sys.path.insert(0, str(tmp_path))
    made = Own(tmp_path)
    try:
        yield made
    finally:
        pptrace.uninstrument()
        sys.path.remove(str(tmp_path))
        for name in (made.name, made.consumer_name):
            sys.modules.pop(name, None)


# --- the grammar --------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "expected"), [
    ("mytransport", Target("mytransport")),
    ("  pkg.sub.mod ", Target("pkg.sub.mod")),
    ("pkg.mod:send_aux,recv_aux", Target("pkg.mod", "send_aux", "recv_aux")),
    ("pkg.mod: send_aux , recv_aux", Target("pkg.mod", "send_aux", "recv_aux")),
    (DEFAULT_MODULE, DEFAULT_TARGETS[0]),
])
def test_a_target_spec_parses_into_its_record(spec: str, expected: Target) -> None:
    target = parse_target(spec)
    assert target == expected and target.module == expected.module
    assert parse_target(target.spec) == target  # the spec is written back as it is read


@pytest.mark.parametrize("spec", [
    "", ":a,b", "my-transport", "pkg..mod", "mod:", "mod:attach", "mod:a,b,c", "mod:a,",
    "mod:a,a", "mod:1a,b", "mod:a b,c", "mod;other",
])
def test_a_malformed_target_is_one_line_naming_it(spec: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_target(spec)
    message = str(info.value)
    assert "\n" not in message and repr(spec) in message
    assert "MODULE or MODULE:ATTACH,EXTRACT" in message or "two different" in message


def test_pptrace_targets_separates_targets_with_semicolons() -> None:
    raw = "a.b ; c:send,recv;;a.b"
    targets = parse_targets(raw)
    assert targets == (Target("a.b"), Target("c", "send", "recv"))  # duplicates once, in order
    assert parse_targets(format_targets(targets)) == targets
    assert parse_targets(None) == parse_targets("  ") == DEFAULT_TARGETS
    assert Config.from_env({"PPTRACE_TARGETS": raw}).targets == targets
    assert Config.from_env({}).targets == DEFAULT_TARGETS
    with pytest.raises(ConfigError, match=r"^PPTRACE_TARGETS='a,b': target 'a,b'"):
        Config.from_env({"PPTRACE_TARGETS": "a,b"})


def test_targets_are_given_as_strings_records_or_both() -> None:
    mixed = as_targets(["x;y:s,r", Target("z"), "x"])
    assert mixed == (Target("x"), Target("y", "s", "r"), Target("z"))
    assert as_targets(Target("m", "s", "r")) == (Target("m", "s", "r"),)
    for bad in ([], "", [3], 3, [Target("not a module")]):
        with pytest.raises(ConfigError):
            as_targets(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="targets"):
        Config(targets=("x",))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'bad name'"):
        pptrace.instrument(QUIET, targets="bad name")
    assert active_recorder() is None  # a refused target activates nothing


# --- patching a target --------------------------------------------------------------------------


def _snapshot(mod: types.ModuleType) -> dict[str, int]:
    return {name: id(value) for name, value in mod.__dict__.items()}


def test_a_target_loaded_before_instrument_is_patched_and_restored_exactly(own: Own) -> None:
    transport, consumer = own.transport(), own.consumer()
    before = _snapshot(transport), _snapshot(consumer)
    send, recv = transport.send_aux, transport.recv_aux

    rec = pptrace.instrument(QUIET, targets=own.spec)
    assert rec is not None
    for holder, a_name, e_name in ((transport, "send_aux", "recv_aux"),
                                   (consumer, "send_aux", "receive_alias")):
        assert is_wrapped(getattr(holder, a_name)) and is_wrapped(getattr(holder, e_name))
        assert unwrap(getattr(holder, a_name)) is send
        assert unwrap(getattr(holder, e_name)) is recv
    assert consumer.recv_aux is consumer.receive_alias is transport.recv_aux  # one wrapper
    out = consumer.step({"next_token_ids": torch.tensor([1])}, sample_output(), Observer())
    assert out.named["scores"].shape == (2, 3)
    assert rec.recorded == 2

    pptrace.uninstrument()
    assert (_snapshot(transport), _snapshot(consumer)) == before  # every binding, exactly


def test_a_target_imported_after_instrument_is_patched_with_its_importers(own: Own) -> None:
    rec = pptrace.instrument(QUIET, targets=own.spec)
    assert rec is not None and rec._thread is None  # nothing loaded yet: nothing started
    transport = own.transport()
    assert is_wrapped(transport.send_aux) and is_wrapped(transport.recv_aux)
    assert type(transport.__loader__).__name__ == "SourceFileLoader"  # the real loader stays
    assert rec._thread is not None  # armed once patched
    consumer = own.consumer()  # binds the wrappers by itself
    assert consumer.send_aux is transport.send_aux and consumer.receive_alias is (
        transport.recv_aux)
    send, recv = unwrap(transport.send_aux), unwrap(transport.recv_aux)
    consumer.step({}, sample_output(), Observer())
    assert rec.recorded == 2

    pptrace.uninstrument()
    for holder, name, original in ((transport, "send_aux", send), (transport, "recv_aux", recv),
                                   (consumer, "send_aux", send), (consumer, "recv_aux", recv),
                                   (consumer, "receive_alias", recv)):
        assert getattr(holder, name) is original, name
    assert not any(isinstance(f, ImportHook) for f in sys.meta_path)


def test_a_target_is_never_wrapped_twice(own: Own, tmp_path: Path) -> None:
    transport = own.transport()
    send = transport.send_aux
    # A second module re-exporting the same functions, named as a target of its own too.
    (tmp_path / f"{own.name}_alias.py").write_text(
        f"from {own.name} import send_aux as put, recv_aux as take\n")
    alias = importlib.import_module(f"{own.name}_alias")
    try:
        for _ in range(3):
            rec = pptrace.instrument(QUIET, targets=[own.spec, own.spec,
                                                     f"{alias.__name__}:put,take"])
            assert pptrace.instrument(QUIET, targets=own.spec) is rec  # idempotent
            assert transport.send_aux.__wrapped__ is send  # exactly one layer
            assert alias.put is transport.send_aux
            alias.put({}, sample_output())
            assert rec is not None and rec.recorded == 1  # recorded once, not twice
            pptrace.uninstrument()
            assert transport.send_aux is send and alias.put is send
    finally:
        sys.modules.pop(alias.__name__, None)


def test_a_target_leaves_sglangs_module_alone_unless_named(own: Own) -> None:
    engine = real_module()
    attach = getattr(engine, ATTACH)
    own.transport()
    pptrace.instrument(QUIET, targets=own.spec)
    assert getattr(engine, ATTACH) is attach  # only the named target is patched
    pptrace.uninstrument()
    pptrace.instrument(QUIET, targets=[DEFAULT_MODULE, own.spec])
    assert is_wrapped(getattr(engine, ATTACH)) and is_wrapped(getattr(engine, EXTRACT))
    assert is_wrapped(own.transport().send_aux)
    pptrace.uninstrument()
    assert getattr(engine, ATTACH) is attach and not is_wrapped(own.transport().send_aux)


def test_bad_targets_are_one_line_each_and_the_good_one_is_still_traced(
    own: Own, caplog: pytest.LogCaptureFixture
) -> None:
    bad = [f"{own.name}:send_aux,no_such_function", f"{own.name}:NOT_A_FUNCTION,recv_aux",
           f"no_such_pkg_{own.name}.transport"]
    with caplog.at_level(logging.WARNING, logger="pptrace"):
        for _ in range(2):  # said once, however often it is met
            rec = pptrace.instrument(QUIET, targets=[*bad, own.spec])
            transport = own.transport()  # the engine's import never fails
            transport.send_aux({}, sample_output())
            assert rec is not None and rec.recorded == 1
            pptrace.uninstrument()
            sys.modules.pop(own.name)
    said = sorted(r.getMessage() for r in caplog.records)
    assert said == sorted([
        f"pptrace: target {bad[0]}: {own.name} has no function 'no_such_function'; "
        "not tracing it",
        f"pptrace: target {bad[1]}: {own.name}.NOT_A_FUNCTION is not callable (a int); "
        "not tracing it",
        f"pptrace: target module 'no_such_pkg_{own.name}.transport' cannot be found for "
        f"{sys.executable}; not tracing it",
    ])


def test_only_bad_targets_leave_no_hook_and_patch_nothing(own: Own) -> None:
    meta_path = list(sys.meta_path)
    patch = EnginePatch(lambda a, e, t: (a, e), [f"no_such_pkg_{own.name}"])
    assert patch.apply() is False and sys.meta_path == meta_path
    transport = own.transport()
    patch = EnginePatch(lambda a, e, t: (a, e), [f"{own.name}:nope,recv_aux"])
    assert patch.apply() is True  # the module loads; the target names nothing in it
    assert patch.seen == [] and patch.sites == [] and not is_wrapped(transport.recv_aux)
    patch.restore()
    assert sys.meta_path == meta_path


# --- the import hook ----------------------------------------------------------------------------


def test_the_hook_contains_a_failing_callback_and_waits_again_after_a_failed_import(
    own: Own, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[str] = []

    def broken(module: types.ModuleType) -> None:
        seen.append(module.__name__)
        raise MemoryError("no room")  # a stand-in for any failure inside pptrace

    hook = ImportHook([own.name, f"{own.name}_fails"], broken, once=True)
    hook.install()
    try:
        (tmp_path / f"{own.name}_fails.py").write_text("raise ValueError('engine bug')\n")
        with pytest.raises(ValueError, match="engine bug"):  # the engine's own error, untouched
            importlib.import_module(f"{own.name}_fails")
        assert hook in sys.meta_path and seen == []  # a failed import: still waiting
        assert own.transport().send_aux is not None  # the import succeeds despite the callback
        assert seen == [own.name] and hook not in sys.meta_path  # once: it stepped aside
        assert capsys.readouterr().err == (
            f"pptrace: not tracing {own.name}: MemoryError: no room\n")
    finally:
        hook.remove()
        sys.modules.pop(f"{own.name}_fails", None)
