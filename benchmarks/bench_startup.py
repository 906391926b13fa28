"""Start-up cost of pptrace's activation, per Python process, side by side with none.

    python benchmarks/bench_startup.py                 # 7 interleaved repeats
    python benchmarks/bench_startup.py --repeats 15

``pptrace run`` activates pptrace in every Python process of the engine's tree. Two questions:

- ``bare``: a process that never imports the transport module (a helper, a compile worker):
  ``python -c pass`` plain vs with pptrace's bootstrap (``PPTRACE_ENABLED=1``, ``PYTHONPATH``);
- ``engine``: a process that imports SGLang's transport module (with torch): plain vs patched by
  pptrace with file export, and with file and OTLP export (the OTLP exporter is built at arming).

Variants run in a rotated order within each repeat, so that machine noise hits them alike; the
figure is the median wall time of the whole process, and the ratio is against the plain variant.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from pptrace.cli.run import bootstrap_dir  # noqa: E402

IMPORT_ENGINE = (
    "import importlib.util, sys, types\n"
    "spec = importlib.util.find_spec('sglang')\n"
    "bare = types.ModuleType('sglang'); bare.__path__ = list(spec.submodule_search_locations)\n"
    "sys.modules['sglang'] = bare\n"
    "import sglang.srt.sampling.sampling_observer_pp\n"
)


def _env(traced: bool, export: str, trace_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PPTRACE_", "OTEL_"))}
    env["PYTHONPATH"] = REPO
    if traced:
        env.update(PPTRACE_ENABLED="1", PPTRACE_EXPORT=export, PPTRACE_DIR=trace_dir,
                   PYTHONPATH=os.pathsep.join([bootstrap_dir(), REPO]),
                   # a collector that is not there: the exporter is built, nothing waits on it
                   OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    return env


def _time(code: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="pptrace-bench-startup-")
    variants = {
        "bare: plain": ("pass", _env(False, "", tmp)),
        "bare: pptrace": ("pass", _env(True, "file", tmp)),
        "engine: plain": (IMPORT_ENGINE, _env(False, "", tmp)),
        "engine: pptrace file": (IMPORT_ENGINE, _env(True, "file", tmp)),
        "engine: pptrace file,otlp": (IMPORT_ENGINE, _env(True, "file,otlp", tmp)),
    }
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    for name in names:  # warm the OS caches once
        _time(*variants[name])
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(_time(*variants[name]))
    print(f"process wall time, median of {args.repeats} (python {sys.version.split()[0]})")
    base = {"bare": statistics.median(times["bare: plain"]),
            "engine": statistics.median(times["engine: plain"])}
    for name in names:
        med = statistics.median(times[name])
        ref = base[name.split(":")[0]]
        print(f"  {name:<28} {med * 1000:8.1f} ms   x{med / ref:5.2f}   "
              f"(+{(med - ref) * 1000:6.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
