"""Screenshots of the viewer on the demo's own traces, for the README and the docs site.

Runs ``pptrace demo`` with a fault (real gloo ranks, CPU), opens the viewer headless on the traces
it wrote, and saves Textual's own SVG export of what a user sees first: the grid on the first
divergence, and, for a message-layer fault, the message screen (``M``).

    python scripts/shoot_demo_viewer.py                      # writes docs/screenshots/demo-*.svg
    python scripts/shoot_demo_viewer.py --out /tmp/shots
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (file name, demo arguments, keys pressed after the first screen, terminal size)
SHOTS = (
    ("demo-dtype-in-transit.svg", ("--fault", "dtype-in-transit"), (), (120, 34)),
    ("demo-messages-key-dropped.svg", ("--fault", "key-dropped"), ("M",), (120, 34)),
)


def run_demo(out: Path, args: tuple[str, ...]) -> None:
    """Run the demo into ``out`` (its exit status is 1: the fault is found)."""
    subprocess.run([sys.executable, "-m", "pptrace", "demo", *args, "--steps", "12",
                    "--out", str(out), "--no-view"], check=False, stdout=subprocess.DEVNULL)
    if not any(out.glob("*.jsonl*")):
        raise SystemExit(f"the demo wrote no traces into {out}")


async def shoot(traces: Path, keys: tuple[str, ...], size: tuple[int, int], path: Path) -> None:
    """Open the viewer on ``traces``, press ``keys``, save the screen as SVG to ``path``."""
    from pptrace_tui.app import PptraceViewer
    from pptrace_tui.screens.main import MainScreen

    from pptrace.analyze.analyzer import analysis
    from pptrace.load.loader import load_paths

    trace = load_paths([str(traces)])
    app = PptraceViewer.of(trace, analysis(trace))
    async with app.run_test(size=size) as pilot:
        for _ in range(500):  # bounded: the loading screen gives way to the main screen
            if isinstance(app.screen, MainScreen) and app.screen.index.timeline_ready:
                break
            await pilot.pause(0.02)
        else:
            raise SystemExit("the viewer's main screen never came up")
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.3)
        await pilot.pause(0.2)
        app.save_screenshot(filename=path.name, path=str(path.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, demo_args, keys, size in SHOTS:
            traces = Path(tmp) / name.removesuffix(".svg")
            run_demo(traces, demo_args)
            asyncio.run(shoot(traces, keys, size, args.out / name))
            print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
