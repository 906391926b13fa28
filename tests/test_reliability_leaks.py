"""Nothing leaves that should not: traces hold metadata, never tensor values; fingerprints are
hashes; no unsafe deserialisation anywhere in pptrace or the viewer; every network call has a
timeout; file names come from rank and pid; trace text reaches the terminal inert.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import itertools
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch

from pptrace.export.trace_file import trace_file_name
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, RankInfo, TensorMeta
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output
from tests.helpers_reliability import (
    SENTINEL,
    ListSink,
    file_sink_factory,
    make_recorder,
    trace_files,
    transport,
    write_hostile_traces,
)

ROOT = Path(__file__).resolve().parent.parent

# Values no trace should ever contain, in any form.
FLOATS = torch.tensor([1234.5678, -8765.4321, 3.14159e-7, 271828.18], dtype=torch.float32)
INTS = torch.tensor([0x5EC12E7C0FFEE, -0x0BADC0DE5EED], dtype=torch.int64)
BLOB = (torch.arange(4096, dtype=torch.int32) * 2654435761 % 2**31).to(torch.int32)


def _forms(t: torch.Tensor) -> list[bytes]:
    """Every way a tensor's contents could appear in a text file."""
    raw = t.contiguous().numpy().tobytes()
    forms = [raw, raw.hex().encode(), base64.b64encode(raw), str(t).encode(),
             repr(t.tolist()).encode()]
    for v in t.tolist():
        text = repr(v)
        forms.append(text.encode())
        if isinstance(v, float):
            forms.append(f"{v:.4f}".encode())
            forms.append(repr(float(torch.tensor(v, dtype=torch.float32))).encode())
        else:
            forms.append(hex(v).encode())
    for i in range(0, len(raw), t.element_size()):
        elem = raw[i:i + t.element_size()]
        if len(elem) >= 8:
            forms.append(elem.hex().encode())
    return [f for f in forms if len(f) >= 6]


def _record(config: Config, tmp_path: Path) -> tuple[Recorder, list[str]]:
    rec = make_recorder(config, sink_factory=file_sink_factory(config)).start()
    mod = transport()
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    for _ in range(3):
        d = {"next_token_ids": INTS}
        attach(d, Output({"scores": FLOATS, "ids": INTS, "blob": BLOB}))
        extract(d, Observer(SENTINEL))
        # The error paths record too (flight mode dumps on them).
        d = {"next_token_ids": INTS, PREFIX + "blob": BLOB}
        try:
            attach(d, Output({"scores": FLOATS, "blob": BLOB}))
        except RuntimeError:
            pass
        try:
            extract(d, Observer(None))
        except RuntimeError:
            pass
    rec.request_dump()
    rec.shutdown(timeout=5.0)
    return rec, trace_files(str(tmp_path))


@pytest.mark.parametrize(("mode", "fingerprint"),
                         list(itertools.product(("stream", "flight"), (False, True))))
def test_trace_files_hold_no_tensor_values(tmp_path: Path, mode: str, fingerprint: bool) -> None:
    config = Config(trace_dir=str(tmp_path), mode=mode, fingerprint=fingerprint,
                    flush_interval=60)
    rec, files = _record(config, tmp_path)
    assert files and rec.recorded == 12
    data = b"".join(Path(f).read_bytes() for f in files)
    assert b"scores" in data and b"float32" in data  # the metadata is there
    for tensor in (FLOATS, INTS, BLOB):
        for form in _forms(tensor):
            assert form not in data, f"tensor contents leaked into the trace: {form[:40]!r}"


def test_fingerprints_are_short_hashes_of_the_contents() -> None:
    sink = ListSink()
    rec = make_recorder(Config(fingerprint=True, flush_interval=60), sink)
    mod = transport()
    attach, _ = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                               mod.pop_auxiliary_output_from_pp_tensors, rec)
    same = FLOATS.clone()
    attach({}, Output({"a": FLOATS, "b": same, "c": BLOB, "d": INTS}))
    rec.shutdown(timeout=5.0)
    (event,) = sink.events
    fps = {m.name: m.fingerprint for m in event.tensors}
    for name, tensor in (("a", FLOATS), ("c", BLOB), ("d", INTS)):
        fp = fps[name]
        assert fp is not None and re.fullmatch(r"b2:[0-9a-f]{16}", fp), fp
        raw = tensor.contiguous().numpy().tobytes()
        assert fp == "b2:" + hashlib.blake2b(raw, digest_size=8).hexdigest()
    assert fps["a"] == fps["b"]  # equal contents, equal hash
    assert len({fps["a"], fps["c"], fps["d"]}) == 3


def test_fingerprints_off_by_default() -> None:
    sink = ListSink()
    rec = make_recorder(Config(flush_interval=60), sink)
    mod = transport()
    attach, _ = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                               mod.pop_auxiliary_output_from_pp_tensors, rec)
    attach({}, Output({"a": FLOATS}))
    rec.shutdown(timeout=5.0)
    assert all(m.fingerprint is None for e in sink.events for m in e.tensors)


# --- static scans ----------------------------------------------------------------------------


def _sources(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in (ROOT / part).rglob("*.py"))


UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle",
                  "joblib"}
UNSAFE_BUILTINS = {"eval", "exec", "compile", "__import__"}
UNSAFE_ATTRS = {("torch", "load"), ("yaml", "load"), ("yaml", "unsafe_load"),
                ("yaml", "full_load"), ("numpy", "load"), ("np", "load"),
                ("pickle", "load"), ("pickle", "loads"), ("marshal", "loads")}


def _unsafe_uses(path: Path, base: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(base)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in UNSAFE_MODULES:
                found.append(f"{where}: from {node.module} import ...")
            if node.module == "torch" and any(a.name == "load" for a in node.names):
                found.append(f"{where}: from torch import load")
        elif isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id in UNSAFE_BUILTINS:
                found.append(f"{where}: {fn.id}()")
            elif isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and (
                (fn.value.id, fn.attr) in UNSAFE_ATTRS
            ):
                found.append(f"{where}: {fn.value.id}.{fn.attr}()")
            elif isinstance(fn, ast.Attribute) and fn.attr in UNSAFE_BUILTINS and isinstance(
                fn.value, ast.Name) and fn.value.id == "builtins":
                found.append(f"{where}: builtins.{fn.attr}()")
    return found


def test_the_scans_find_what_they_look_for(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import pickle\nfrom torch import load\nx = eval('1')\ntorch.load(f)\n"
                     "urllib.request.urlopen(u)\nurlopen(u, timeout=None)\n"
                     "requests.get(u, timeout=3)\nOTLPSpanExporter(endpoint=e)\n")
    assert len(_unsafe_uses(probe, tmp_path)) == 4
    calls, missing = _network_calls_without_timeout(probe, tmp_path)
    assert calls == 4 and len(missing) == 3


def test_no_unsafe_deserialisation_in_pptrace_or_the_viewer() -> None:
    files = _sources("pptrace", "tui")
    assert len(files) > 20
    found = [hit for path in files for hit in _unsafe_uses(path)]
    assert not found, "unsafe deserialisation or dynamic code:\n" + "\n".join(found)


# A gRPC channel (insecure_channel, secure_channel) takes no timeout: it connects lazily, and
# what waits is each call made on it, each with the request timeout
# (tests/test_otlp_ship_grpc.py: a hung collector ends at the call's deadline).
NETWORK_CALLS = {"urlopen", "create_connection", "HTTPConnection", "HTTPSConnection",
                 "OTLPSpanExporter", "GrpcExporter", "HttpExporter", "get", "post", "put",
                 "request"}


def _network_calls_without_timeout(path: Path, base: Path = ROOT) -> tuple[int, list[str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = 0
    missing = []
    requests_names = {"requests", "httpx", "session", "client"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(
            fn, ast.Attribute) else ""
        if name not in NETWORK_CALLS:
            continue
        if name in {"get", "post", "put", "request"}:
            # Only HTTP client objects: requests.get(...), session.post(...).
            # (self._session.post counts too: the owner's own name, underscores aside.)
            owner = fn.value if isinstance(fn, ast.Attribute) else None
            owner_name = (owner.id if isinstance(owner, ast.Name) else owner.attr
                          if isinstance(owner, ast.Attribute) else "")
            if owner_name.lstrip("_").lower() not in requests_names:
                continue
        calls += 1
        kw = {k.arg: k.value for k in node.keywords}
        timeout = kw.get("timeout")
        if timeout is None or (isinstance(timeout, ast.Constant) and timeout.value is None):
            missing.append(f"{path.relative_to(base)}:{node.lineno}: {name}() without timeout")
    return calls, missing


def test_every_network_call_has_a_timeout() -> None:
    targets = [p for p in _sources("pptrace", "tui")]
    total = 0
    missing: list[str] = []
    for path in targets:
        calls, bad = _network_calls_without_timeout(path)
        total += calls
        missing += bad
    # otlp.py builds both exporters and jaeger.py opens URLs: the scan must have seen them.
    assert total >= 3, total
    assert not missing, "\n".join(missing)


def test_otlp_exporter_timeout_is_short_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from pptrace.export.otlp import make_exporter

    for var in ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    for protocol in ("http/protobuf", "grpc"):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        exporter = make_exporter(Config(exit_timeout=2.0))
        try:
            # Private in the SDK (the silent-collector fault test checks the behaviour itself).
            timeout = getattr(exporter, "_timeout", None)
            if timeout is None:
                timeout = getattr(getattr(exporter, "_client", None), "_timeout", None)
            assert timeout is not None and 0 < timeout <= 2.0, (protocol, timeout)
        finally:
            exporter.shutdown()


# --- file names --------------------------------------------------------------------------------

NAME = re.compile(r"pptrace-rank(\d+|X)-pid\d+\.otlp\.jsonl")


@pytest.mark.parametrize("host", ["h", "../../etc", "a/b\\c", "x\x00y", "$(rm -rf ~)", "ℌ" * 300])
def test_trace_file_name_comes_from_rank_and_pid_only(host: str) -> None:
    for rank in (None, 0, 17):
        name = trace_file_name(RankInfo(rank=rank, host=host, pid=4242))
        assert NAME.fullmatch(name), name
        assert host not in name or host == "h"


def test_hostile_trace_content_never_names_a_file(tmp_path: Path) -> None:
    trace_dir = tmp_path / "traces"
    config = Config(trace_dir=str(trace_dir), flush_interval=60, run_id="../../escape")
    rec = make_recorder(config, sink_factory=file_sink_factory(config))
    mod = transport()
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    names = ["../../../tmp/owned", "/etc/passwd", "a\x00b", "con:", "..", "x" * 5000]
    d: dict[str, object] = {}
    attach(d, Output({n: FLOATS for n in names}))
    extract(d, Observer(SENTINEL))
    rec.shutdown(timeout=5.0)
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert written == ["traces", f"traces/{trace_file_name(rec.rank())}"], written
    assert NAME.fullmatch(trace_file_name(rec.rank()))


# --- trace text in the terminal ----------------------------------------------------------------

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def _cli(*argv: str) -> tuple[int, str, str]:
    from pptrace.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_analyze_text_report_is_inert(tmp_path: Path) -> None:
    write_hostile_traces(tmp_path)
    code, out, err = _cli("analyze", str(tmp_path))
    assert code == 1, err  # the shapes differ: findings
    assert not CONTROL.search(out), repr(CONTROL.search(out))
    # Names are shown literally (escaped, markup untouched), so the user can still find them.
    assert "\\x1b[31mred\\x1b[0m" in out
    assert "[bold magenta]markup[/bold magenta]" in out
    assert "\nFAIL: forged line" not in out
    # Every line of the report is one of its own lines: the newline in a name forged none.
    assert sum(line.startswith(("OK:", "FAIL:")) for line in out.splitlines()) == 1


def test_analyze_json_report_escapes_control_characters(tmp_path: Path) -> None:
    write_hostile_traces(tmp_path)
    code, out, err = _cli("analyze", str(tmp_path), "--format", "json")
    assert code == 1, err
    assert not CONTROL.search(out)
    assert "\\u001b[31mred" in out


def test_cli_error_line_is_inert(tmp_path: Path) -> None:
    bad = tmp_path / "evil.jsonl"
    bad.write_text('{"\\u001b]0;pwned\\u0007": 1}\n{"error": "\\u001b[2J\\r\\nforged"}\n')
    code, out, err = _cli("analyze", str(bad))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("pptrace: error: ")
    assert not CONTROL.search(err), repr(err)


def test_tensor_meta_has_no_field_for_values() -> None:
    # A structural guard: the record pptrace writes per tensor has metadata fields only.
    fields = set(TensorMeta._fields)
    assert fields == {"name", "key", "shape", "dtype", "device", "nbytes", "contiguous",
                      "is_tensor", "fingerprint", "sliced"}, fields



def test_diff_text_is_inert(tmp_path: Path) -> None:
    write_hostile_traces(tmp_path / "a")
    (tmp_path / "b").mkdir()
    write_hostile_traces(tmp_path / "b")
    code, out, err = _cli("diff", str(tmp_path / "a"), str(tmp_path / "b"))
    assert code in (0, 1), err
    assert not CONTROL.search(out), repr(CONTROL.search(out))
    assert "\\x1b[31mred\\x1b[0m" in out and "[bold magenta]markup[/bold magenta]" in out
