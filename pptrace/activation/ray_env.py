"""Ray: the ``runtime_env`` that traces a Ray job's actors and tasks with pptrace.

    import ray
    from pptrace.activation.ray_env import runtime_env

    ray.init(address="auto", runtime_env=runtime_env(dir="/shared/traces", pp_size=2))
    ray.init(runtime_env=runtime_env({"pip": ["mypkg"]}))         # the job's own, plus pptrace's
    Scheduler.options(runtime_env=runtime_env()).remote(...)      # one actor class only

A Ray worker process takes its environment from the raylet of its node, not from the driver. A
local cluster that the driver starts itself (``ray.init()`` with no address) is the driver's own
child, so under ``pptrace run`` its workers inherit pptrace's variables and are traced with
nothing more. A cluster started on its own (``ray start``, KubeRay, the cluster launcher) is not:
the job carries pptrace to its workers in ``runtime_env["env_vars"]``, which is what
``runtime_env()`` returns: the variables ``pptrace run`` sets (``PPTRACE_ENABLED=1``, one run id
for every worker, the trace directory made absolute, pptrace's ``sitecustomize`` folder first on
the workers' ``PYTHONPATH``, ahead of the node's own), this process's ``PPTRACE_*`` and
``OTEL_*`` variables, and the settings given as keywords (``dir="..."`` is ``PPTRACE_DIR``).
Every worker that loads a target module then writes its own trace file, on its node's file
system; the folder is found at the same path as here, as Ray finds the same Python on each node.

Ray runs no exit handler in a worker it kills: ``ray.kill(actor)`` (how SGLang's Ray engine
stops its schedulers) and ``ray.shutdown()`` of a local cluster lose what the worker recorded
since its last background flush (``PPTRACE_FLUSH_INTERVAL``, 1 s by default), and its final
stats. An actor that ends with ``ray.actor.exit_actor()`` flushes everything.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any

from pptrace.model.config import ENV_DOC, Config
from pptrace.model.errors import ConfigError
from pptrace.model.target import as_targets, format_targets

__all__ = ["bootstrap_dir", "runtime_env"]

# pptrace run's own bookkeeping: it means something only in the process tree that run started.
_RUN_ONLY = ("PPTRACE_RUN_PID", "PPTRACE_RUN_STATE")


def bootstrap_dir() -> str:
    """The folder holding pptrace's ``sitecustomize.py`` (the one ``pptrace run`` uses)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")


def runtime_env(
    base: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    **settings: object,
) -> dict[str, Any]:
    """A Ray ``runtime_env`` whose workers run pptrace: ``base`` plus pptrace's ``env_vars``.

    ``settings`` are pptrace variables by their name without ``PPTRACE_``, in lower case
    (``dir``, ``pp_size``, ``targets``, ``export``, ``flush_interval``...); a name pptrace does
    not know, or a value it would refuse, raises ``ConfigError`` here rather than in each worker.
    """
    environ = os.environ if environ is None else environ
    result = dict(base or {})
    env_vars = {name: value for name, value in environ.items()
                if name.startswith(("PPTRACE_", "OTEL_")) and name not in _RUN_ONLY}
    env_vars.update(result.get("env_vars") or {})
    for key, value in settings.items():
        name = f"PPTRACE_{key.upper()}"
        if name not in ENV_DOC or name in _RUN_ONLY:
            raise ConfigError(f"runtime_env: unknown setting {key!r} (no variable {name}; "
                              "pptrace run --help lists them)")
        env_vars[name] = _text(name, value)
    env_vars["PPTRACE_ENABLED"] = "1"
    env_vars["PPTRACE_DIR"] = os.path.abspath(env_vars.get("PPTRACE_DIR") or "pptrace-traces")
    if not env_vars.get("PPTRACE_RUN_ID"):
        env_vars["PPTRACE_RUN_ID"] = uuid.uuid4().hex[:16]
    Config.from_env(env_vars)  # a bad value is said once, here
    # Ray expands ${PYTHONPATH} from the node's environment: the node's own path stays behind.
    rest = env_vars.get("PYTHONPATH") or "${PYTHONPATH}"
    paths = [p for p in rest.split(os.pathsep) if p and p != bootstrap_dir()]
    env_vars["PYTHONPATH"] = os.pathsep.join([bootstrap_dir(), *paths])
    result["env_vars"] = env_vars
    return result


def _text(name: str, value: object) -> str:
    """A setting as its variable's text (a bool is 1 or 0; targets in their one grammar)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if name == "PPTRACE_TARGETS":
        return format_targets(as_targets(value))  # type: ignore[arg-type]  # it checks the type
    return str(value)
