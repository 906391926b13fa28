"""Recorder configuration: defaults, ``PPTRACE_*`` environment variables, and their validation.

    cfg = Config.from_env()            # what PPTRACE_* say, else the defaults
    cfg = Config(mode="flight")        # or built directly, e.g. in tests

Every variable is listed in ``ENV_DOC`` (printed by ``pptrace run --help``); a bad value raises
``ConfigError`` naming the variable and what it accepts.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from pptrace.model.errors import ConfigError
from pptrace.model.target import DEFAULT_TARGETS, Target, parse_targets

__all__ = ["ENV_DOC", "Config"]

ENV_DOC: dict[str, str] = {
    "PPTRACE_ENABLED": "1/0: record at all (default 1 once pptrace is activated)",
    "PPTRACE_DIR": "directory for per-rank trace files (default ./pptrace-traces)",
    "PPTRACE_DIR_UNSAFE_OK": "1/0: write into a PPTRACE_DIR that other users can write to or"
                             " that is not this user's (default 0: refused, with a warning)",
    "PPTRACE_EXPORT": "comma list of sinks: file, otlp, none (default file)",
    "PPTRACE_OTLP_SHIP": "files (default): beside file, OTLP (grpc, http/protobuf or http/json) is"
                         " shipped from the trace files by a shipper process, so the engine's"
                         " process encodes and posts nothing; inline: the engine's process posts"
                         " it itself",
    "PPTRACE_COMPRESS": "none, gzip or zstd (zstd needs the zstandard package): compress the"
                        " trace files, one gzip member / zstd frame per flush (default none)",
    "PPTRACE_ROTATE_MB": "segment size in MB (decimals allowed): write numbered segments"
                         " (default 0: one file; min(100, MAX_MB/10) when PPTRACE_MAX_MB is set)",
    "PPTRACE_MAX_MB": "the most MB a process keeps on disk, its segments together; the oldest are"
                      " deleted first and counted (default 0: no cap; 100 segments when only"
                      " PPTRACE_ROTATE_MB is set)",
    "PPTRACE_SCHEMA": "trace schema version to write: 3 (compact, default), 2 or 1",
    "PPTRACE_MODE": "stream (every event exported) or flight (ring dumped on error/signal/exit)",
    "PPTRACE_FLIGHT_SIZE": "events kept per process in flight mode (default 4096)",
    "PPTRACE_BUFFER": "events held before new ones are dropped and counted (default 1000000)",
    "PPTRACE_FLUSH_INTERVAL": "seconds between background flushes (default 1.0)",
    "PPTRACE_EXIT_TIMEOUT": "seconds allowed to flush at exit (default 2.0)",
    "PPTRACE_FINGERPRINT": "1/0: hash tensor contents (reads tensor memory; default 0)",
    "PPTRACE_NATIVE": "1/0: read tensor metadata with the native reader once built (default 1;"
                      " see pptrace native --help)",
    "PPTRACE_MESSAGES": "1/0: record the PP message layer (the engine's tensor-dict sends,"
                        " receives and broadcasts; default 1)",
    "PPTRACE_ENGINE": "comma list of engines whose message layer to trace (sglang, vllm, or a"
                      " pptrace.engines entry point; default: every installed one)",
    "PPTRACE_NATIVE_DIR": "where pptrace native build puts the reader (default ~/.cache/pptrace)",
    "PPTRACE_TARGETS": "the transport modules to trace, ';' between them, each"
                       " MODULE[:ATTACH,EXTRACT][@PREFIX] (default: the engines' own; set by"
                       " --target)",
    "PPTRACE_RUN_ID": "an id shared by all ranks of one run (default: set by pptrace run)",
    "PPTRACE_RANK": "override the global rank",
    "PPTRACE_PP_RANK": "override the pipeline-parallel rank",
    "PPTRACE_PP_SIZE": "override the pipeline-parallel size",
    "PPTRACE_TP_RANK": "override the tensor-parallel rank",
    "PPTRACE_TP_SIZE": "override the tensor-parallel size",
}

#: What ``PPTRACE_COMPRESS`` takes.
COMPRESSIONS = ("none", "gzip", "zstd")
#: The rotation a cap alone gets: segments of a tenth of the cap, at most the OpenTelemetry
#: Collector file exporter's ``rotation.max_megabytes`` (100); a segment size alone keeps as many
#: segments as its ``max_backups`` (100).
DEFAULT_SEGMENT_MB, DEFAULT_SEGMENTS = 100.0, 100
_MB = 1_000_000

_TRUE = {"1", "true", "yes", "on"}
_MAX_SECONDS = 1e9  # about 31 years
_FALSE = {"0", "false", "no", "off", ""}


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r}: expected 1 or 0")


def _number(env: Mapping[str, str], name: str, default: float, *, integer: bool) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{name}={raw!r}: expected {kind}") from None
    if value < 0:
        raise ConfigError(f"{name}={raw!r}: must not be negative")
    # inf (or anything past threading.TIMEOUT_MAX) made the exit flush raise OverflowError.
    if not math.isfinite(value) or (not integer and value > _MAX_SECONDS):
        raise ConfigError(f"{name}={raw!r}: must be a finite number up to {_MAX_SECONDS:.0f}")
    return value


def _opt_int(env: Mapping[str, str], name: str) -> int | None:
    if env.get(name, "").strip() == "":
        return None
    return int(_number(env, name, 0, integer=True))


def _exporters(env: Mapping[str, str]) -> tuple[str, ...]:
    """``PPTRACE_EXPORT`` when set; else files, plus OTLP when ``OTEL_TRACES_EXPORTER`` names it.

    ``OTEL_TRACES_EXPORTER`` is OpenTelemetry's standard switch; names other than ``otlp`` and
    ``none`` (``console``, ``zipkin``...) are for other tools in the process and change nothing.
    """
    raw = env.get("PPTRACE_EXPORT")
    if raw is not None:
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    otel = {p.strip().lower() for p in env.get("OTEL_TRACES_EXPORTER", "").split(",")}
    return ("file", "otlp") if "otlp" in otel else ("file",)


def _schema(env: Mapping[str, str]) -> int:
    raw = env.get("PPTRACE_SCHEMA", "").strip()
    if raw in ("", "3"):
        return 3
    if raw in ("1", "2"):  # for readers of an older pptrace
        return int(raw)
    raise ConfigError(f"PPTRACE_SCHEMA={raw!r}: expected 1, 2 or 3")


def _targets(env: Mapping[str, str]) -> tuple[Target, ...]:
    raw = env.get("PPTRACE_TARGETS")
    try:
        return parse_targets(raw)
    except ConfigError as exc:
        raise ConfigError(f"PPTRACE_TARGETS={raw!r}: {exc}") from None


@dataclass(frozen=True)
class Config:
    """Everything the recorder and its sinks need to know."""

    enabled: bool = True
    trace_dir: str = "pptrace-traces"
    dir_unsafe_ok: bool = False  # accept a trace directory other users can write to
    exporters: tuple[str, ...] = ("file",)
    mode: str = "stream"  # "stream" | "flight"
    flight_size: int = 4096
    buffer_size: int = 1_000_000
    flush_interval: float = 1.0
    exit_timeout: float = 2.0
    fingerprint: bool = False
    native: bool = True  # use pptrace.record.native's reader when it is built for this process
    #: Record the PP message layer too (the engine adapter's methods, pptrace.engines):
    #: on by default, since most PP transport failures happen there (pptrace.record.messages).
    messages: bool = True
    #: The engines whose message layer is traced (``PPTRACE_ENGINE``); empty: the installed ones.
    engines: tuple[str, ...] = ()
    run_id: str = ""
    rank_overrides: dict[str, int] = field(default_factory=dict)
    targets: tuple[Target, ...] = DEFAULT_TARGETS  # see pptrace.model.target
    compress: str = "none"  # "none" | "gzip" | "zstd" (trace files)
    rotate_mb: float = 0.0  # segment size; 0: see ``segment_bytes``
    max_mb: float = 0.0  # the most a process keeps on disk; 0: see ``max_bytes``
    schema_version: int = 3  # what the sinks write (pptrace.model.schema)
    #: Where OTLP over http/json is posted from: "files" (a shipper process reads the trace
    #: files; the engine's process only writes them) or "inline" (the engine's process).
    otlp_ship: str = "files"

    def __post_init__(self) -> None:
        if self.mode not in ("stream", "flight"):
            raise ConfigError(f"mode {self.mode!r}: expected 'stream' or 'flight'")
        unknown = set(self.exporters) - {"file", "otlp", "none"}
        if unknown:
            raise ConfigError(
                f"exporters {sorted(unknown)}: expected a comma list of file, otlp, none"
            )
        if self.flight_size < 1 or self.buffer_size < 1:
            raise ConfigError("flight_size and buffer_size must be at least 1")
        targets = self.targets
        if not isinstance(targets, tuple) or not targets or not all(
                isinstance(t, Target) for t in targets):
            raise ConfigError("targets: expected at least one pptrace.model.target.Target "
                              "(pptrace.instrument(targets=...) also takes spec strings)")
        self._check_files()

    def _check_files(self) -> None:
        if self.compress not in COMPRESSIONS:
            raise ConfigError(f"PPTRACE_COMPRESS={self.compress!r}: expected none, gzip or zstd")
        if self.compress == "zstd" and importlib.util.find_spec("zstandard") is None:
            raise ConfigError("PPTRACE_COMPRESS=zstd needs the zstandard package "
                              "(pip install zstandard), or use gzip")
        for name, value in (("PPTRACE_ROTATE_MB", self.rotate_mb),
                            ("PPTRACE_MAX_MB", self.max_mb)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name}={value!r}: expected a number of MB, 0 or more")
        if self.max_mb and self.rotate_mb > self.max_mb:
            raise ConfigError(f"PPTRACE_ROTATE_MB={self.rotate_mb:g} is over PPTRACE_MAX_MB="
                              f"{self.max_mb:g}: a segment must fit in the budget")
        if self.otlp_ship not in ("files", "inline"):
            raise ConfigError(f"PPTRACE_OTLP_SHIP={self.otlp_ship!r}: expected files or inline")
        if self.schema_version not in (1, 2, 3):
            raise ConfigError(f"PPTRACE_SCHEMA={self.schema_version!r}: expected 1, 2 or 3")

    @property
    def segment_bytes(self) -> int:
        """Bytes per trace-file segment; 0: one file, not rotated."""
        if self.rotate_mb:
            return max(1, int(self.rotate_mb * _MB))
        if self.max_mb:
            return max(1, int(min(DEFAULT_SEGMENT_MB, self.max_mb / 10) * _MB))
        return 0

    @property
    def max_bytes(self) -> int:
        """The most bytes a process's trace keeps on disk; 0: no cap."""
        if self.max_mb:
            return max(1, int(self.max_mb * _MB))
        return self.segment_bytes * DEFAULT_SEGMENTS

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Config:
        """Build a config from ``PPTRACE_*`` variables (``os.environ`` by default)."""
        env = os.environ if env is None else env
        exporters = _exporters(env)
        ranks = {
            key: value
            for key, var in (
                ("rank", "PPTRACE_RANK"),
                ("pp_rank", "PPTRACE_PP_RANK"),
                ("pp_size", "PPTRACE_PP_SIZE"),
                ("tp_rank", "PPTRACE_TP_RANK"),
                ("tp_size", "PPTRACE_TP_SIZE"),
            )
            if (value := _opt_int(env, var)) is not None
        }
        cfg = cls(
            enabled=_bool(env, "PPTRACE_ENABLED", True),
            trace_dir=env.get("PPTRACE_DIR") or "pptrace-traces",
            dir_unsafe_ok=_bool(env, "PPTRACE_DIR_UNSAFE_OK", False),
            exporters=exporters or ("none",),
            mode=env.get("PPTRACE_MODE", "stream").strip().lower() or "stream",
            flight_size=int(_number(env, "PPTRACE_FLIGHT_SIZE", 4096, integer=True)),
            buffer_size=int(_number(env, "PPTRACE_BUFFER", 1_000_000, integer=True)),
            flush_interval=_number(env, "PPTRACE_FLUSH_INTERVAL", 1.0, integer=False),
            exit_timeout=_number(env, "PPTRACE_EXIT_TIMEOUT", 2.0, integer=False),
            fingerprint=_bool(env, "PPTRACE_FINGERPRINT", False),
            native=_bool(env, "PPTRACE_NATIVE", True),
            messages=_bool(env, "PPTRACE_MESSAGES", True),
            engines=tuple(n.strip().lower() for n in env.get("PPTRACE_ENGINE", "").split(",")
                          if n.strip()),
            run_id=env.get("PPTRACE_RUN_ID", ""),
            rank_overrides=ranks,
            targets=_targets(env),
            compress=env.get("PPTRACE_COMPRESS", "none").strip().lower() or "none",
            rotate_mb=_number(env, "PPTRACE_ROTATE_MB", 0.0, integer=False),
            max_mb=_number(env, "PPTRACE_MAX_MB", 0.0, integer=False),
            schema_version=_schema(env),
            otlp_ship=env.get("PPTRACE_OTLP_SHIP", "files").strip().lower() or "files",
        )
        return replace(cfg, **overrides) if overrides else cfg  # type: ignore[arg-type]
