"""``pptrace native build|status``: the optional native metadata reader (``pptrace.record.native``).

Exit status: 0 built / in use; 1 (status) not in use here; 2 the build failed or no compiler.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from pptrace.model.config import Config

__all__ = ["add_parser", "run"]

EPILOG = """\
The wrappers read each auxiliary tensor's shape, dtype, device and contiguity on the engine's
thread. In Python that costs about 0.4 us a tensor; the native reader reads them all in one
C++ call. It is optional: without it the wrappers record the same events with Python reads.

build    compile it for the torch and Python of this environment (a C++ compiler and about
         20 s; nothing is downloaded). pptrace run does this by itself in the background
         when no build exists (--native-build); run it by hand for an engine started some
         other way. Traced processes already running take the build up within about a
         second (their recorder thread looks for it); no restart is needed. The library goes
         to $PPTRACE_NATIVE_DIR (default ~/.cache/pptrace/native), in a folder named by the
         source, torch build, Python and platform it was built for.
status   say where this environment's build is and whether a rank process would use it.

Every process checks the library at load: it must be built for exactly its torch and Python
and read a set of probe tensors exactly as the Python reads do, or it is not used (and
status says why). PPTRACE_NATIVE=0 keeps the Python reads even when it is built.

examples:
  pptrace native build && pptrace native status
  PPTRACE_NATIVE_DIR=/shared/pptrace pptrace native build   # for a shared venv
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Create the ``native`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "native",
        help="build or inspect the optional native tensor-metadata reader (faster hot path)",
        description="Build or inspect pptrace's optional native metadata reader.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=("build", "status"), help="build or status")
    parser.add_argument("--verbose", action="store_true", help="print the compiler command")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Build or report; return the exit status."""
    import torch

    from pptrace.record import native  # imports torch: only for this subcommand

    if args.action == "build":
        path = native.library_path()
        if path.exists():
            print(f"already built: {path}")
        else:
            print(f"building the native reader for torch {torch.__version__} "
                  f"(about 20 s) ...", file=sys.stderr, flush=True)
            start = time.monotonic()
            path = native.build(verbose=args.verbose)
            print(f"built in {time.monotonic() - start:.1f} s: {path}")
    st = native.status()
    if not Config.from_env().native:
        print(f"native reader: built but turned off by PPTRACE_NATIVE=0 ({st.path})" if st.loaded
              else f"native reader: turned off by PPTRACE_NATIVE=0; {st.reason} ({st.path})")
        return 1
    print(f"native reader: {st.reason} ({st.path})")
    return 0 if st.loaded else (2 if args.action == "build" else 1)
