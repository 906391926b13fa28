"""The tracing options that ``pptrace run`` and ``pptrace demo`` share, and the variables they set.

Both commands take the same ``--export``, ``--endpoint``, ``--protocol``, ``--service-name``,
``--fingerprint``, ``--compress``, ``--rotate-mb`` and ``--max-mb`` options and honour the same
``PPTRACE_*`` and ``OTEL_*`` variables, so that what works for the demo works for an engine
(and "run the demo, open Jaeger" is one command).

    add_export_arguments(parser)
    env = export_env(args, os.environ)       # os.environ plus what the options say
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Mapping

from pptrace.model.config import Config
from pptrace.model.errors import ConfigError

__all__ = ["EXPORT_OPTION_ENV", "add_export_arguments", "export_env"]

#: option -> the variable it sets
EXPORT_OPTION_ENV = (
    ("export", "PPTRACE_EXPORT"),
    ("protocol", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
    ("endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ("service_name", "OTEL_SERVICE_NAME"),
    ("compress", "PPTRACE_COMPRESS"),
    ("rotate_mb", "PPTRACE_ROTATE_MB"),
    ("max_mb", "PPTRACE_MAX_MB"),
)


def add_export_arguments(parser: argparse.ArgumentParser, *, fingerprint: bool = True) -> None:
    """Add the options that say where spans go (and, optionally, ``--fingerprint``)."""
    g = parser.add_argument_group("where spans go (the same as for pptrace run)")
    g.add_argument("--export", metavar="SINKS",
                   help="comma list of file, otlp, none (default: PPTRACE_EXPORT, else file; "
                        "--endpoint or --protocol alone means file,otlp)")
    g.add_argument("--endpoint", metavar="URL",
                   help="OTLP collector, e.g. http://localhost:4318 (http/protobuf) or "
                        "http://localhost:4317 (grpc)")
    g.add_argument("--protocol", choices=("grpc", "http/protobuf", "http/json"),
                   help="OTLP protocol (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/json); "
                        "beside file, each is sent from the trace files by a shipper process, "
                        "outside the engine's")
    g.add_argument("--service-name", metavar="NAME",
                   help="service name the spans carry, as Jaeger lists it (default pptrace)")
    f = parser.add_argument_group("trace files (PPTRACE_COMPRESS, PPTRACE_ROTATE_MB, "
                                  "PPTRACE_MAX_MB)")
    f.add_argument("--compress", choices=("none", "gzip", "zstd"),
                   help="compress each flush as one gzip member or zstd frame (.gz, .zst; zstd "
                        "needs the zstandard package; default none)")
    f.add_argument("--rotate-mb", metavar="MB",
                   help="write numbered segments of this size (decimals allowed; default: one "
                        "file, or a tenth of --max-mb up to 100)")
    f.add_argument("--max-mb", metavar="MB",
                   help="the most one process keeps on disk; its oldest segments are deleted "
                        "first, and counted (default: no cap, or 100 segments with --rotate-mb)")
    if fingerprint:
        g.add_argument("--fingerprint", action="store_true", default=None,
                       help="hash each auxiliary tensor's bytes, so that bytes changed on the way "
                            "are found (reads tensor memory: costs time on the engine's path)")


def export_env(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` plus the variables the options set; refuses bad values with ``ConfigError``."""
    env = dict(environ)
    for option, var in EXPORT_OPTION_ENV:
        value = getattr(args, option, None)
        if value is not None:
            env[var] = str(value)
    if getattr(args, "fingerprint", None):
        env["PPTRACE_FINGERPRINT"] = "1"
    asks_collector = getattr(args, "endpoint", None) or getattr(args, "protocol", None)
    if asks_collector and getattr(args, "export", None) is None and "PPTRACE_EXPORT" not in env:
        env["PPTRACE_EXPORT"] = "file,otlp"  # asking for a collector means sending to it
    config = Config.from_env(env)  # refuse bad values here, once, rather than in every rank
    protocol = ""
    for var in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = env.get(var, "").strip().lower()
        if value and value not in _EXPORTERS:
            raise ConfigError(f"{var}={env[var]!r}: pptrace exports grpc, http/protobuf or "
                              "http/json")
        protocol = protocol or value
    if "otlp" in config.exporters:
        shipped = "file" in config.exporters and config.otlp_ship == "files"
        _require_exporter(protocol or "http/json", shipped)
    return env


#: protocol -> what sends it from the trace files (the shipper), and what sends it inline
_EXPORTERS = {
    "grpc": (("grpc", "opentelemetry.proto"), ("opentelemetry.exporter.otlp.proto.grpc",)),
    "http/protobuf": (("requests", "opentelemetry.proto"),
                      ("opentelemetry.exporter.otlp.proto.http",)),
    "http/json": (("requests",), ("requests",)),
}


def _require_exporter(protocol: str, shipped: bool) -> None:
    """Say before any rank starts that OTLP cannot be sent, rather than count every span lost:
    the shipper (``shipped``: beside the trace files) needs only the wire's own packages, the
    inline path the OpenTelemetry exporter of the protocol."""
    for module in _EXPORTERS[protocol][0 if shipped else 1]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ConfigError(f"OTLP export over {protocol} needs {module}: "
                              "pip install 'pptrace[otlp]'")
