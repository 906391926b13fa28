"""Draw a ``pptrace export --perfetto`` file as an SVG picture of Perfetto's timeline.

No browser here reaches ui.perfetto.dev, so the docs' picture is drawn from the exported
trace-event JSON itself, laid out as Perfetto lays it out: a process track per rank (named and
ordered by the export's metadata events), a thread track under it per recording thread, every
complete event (``X``) as a slice nested by depth, each flow (``s`` -> ``f``) as an arrow from the
end of its first slice to the start of the slice it binds to, and each instant (``i``, a finding)
as a marker.

    pptrace demo --ranks 4 --tp 2 --steps 6 --fault dtype-in-transit --out run --no-view
    pptrace export --perfetto pp.json run
    python scripts/render_perfetto_svg.py pp.json docs/screenshots/perfetto-demo.svg
"""

from __future__ import annotations

import argparse
import json
import zlib
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

WIDTH, LABELS, ROW, HEAD, AXIS = 1400, 250, 20, 22, 30
PALETTE = ("#4e79a7", "#59a14f", "#9c755f", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#86bcb6")
FIXED = {"attach": "#e15759", "extract": "#4e79a7", "send": "#59a14f", "recv": "#76b7b2",
         "recv (waiting)": "#f28e2b"}


@dataclass
class Thread:
    name: str = ""
    sort: int = 0
    slices: list[dict] = field(default_factory=list)  # type: ignore[type-arg]
    depth: int = 1


@dataclass
class Process:
    name: str = ""
    sort: int = 0
    threads: dict[int, Thread] = field(default_factory=dict)


def colour(name: str) -> str:
    """Perfetto colours a slice by its name; so does this, stably."""
    return FIXED.get(name, PALETTE[zlib.crc32(name.encode()) % len(PALETTE)])


def read(path: Path) -> tuple[dict[int, Process], list[dict], list[dict]]:  # type: ignore[type-arg]
    """Processes with their threads and slices, the flow events, and the instants."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    procs: dict[int, Process] = {}
    flows, instants = [], []
    for e in events:
        proc = procs.setdefault(e["pid"], Process())
        thread = proc.threads.setdefault(e["tid"], Thread())
        ph, name, args = e["ph"], e.get("name", ""), e.get("args", {})
        if ph == "M":
            if name == "process_name":
                proc.name = args["name"]
            elif name == "process_sort_index":
                proc.sort = args["sort_index"]
            elif name == "thread_name":
                thread.name = args["name"]
            elif name == "thread_sort_index":
                thread.sort = args["sort_index"]
        elif ph == "X":
            thread.slices.append(e)
        elif ph in ("s", "f"):
            flows.append(e)
        elif ph == "i":
            instants.append(e)
    for proc in procs.values():
        for thread in proc.threads.values():
            thread.slices.sort(key=lambda s: (s["ts"], -s.get("dur", 0)))
            ends: list[float] = []  # the open slices' ends, outermost first
            for s in thread.slices:
                while ends and ends[-1] <= s["ts"]:
                    ends.pop()
                s["_depth"] = len(ends)
                ends.append(s["ts"] + s.get("dur", 0))
                thread.depth = max(thread.depth, len(ends))
    return procs, flows, instants


def render(path: Path, title: str) -> str:
    """The SVG text of the timeline in ``path``."""
    procs, flows, instants = read(path)
    spans = [s for p in procs.values() for t in p.threads.values() for s in t.slices]
    t0 = min(s["ts"] for s in spans)
    t1 = max(s["ts"] + s.get("dur", 0) for s in spans)
    scale = (WIDTH - LABELS - 20) / max(t1 - t0, 1.0)

    def x(ts: float) -> float:
        return LABELS + (ts - t0) * scale

    out: list[str] = []
    rows: dict[tuple[int, int], float] = {}  # (pid, tid) -> the track's top
    y = HEAD + AXIS
    for pid, proc in sorted(procs.items(), key=lambda kv: (kv[1].sort, kv[0])):
        threads = [(tid, t) for tid, t in proc.threads.items() if t.slices or t.name]
        if not threads:
            continue
        out.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{ROW}" fill="#eef1f6"/>'
                   f'<text x="8" y="{y + 14}" class="proc">▾ {escape(proc.name)}</text>')
        y += ROW
        for tid, thread in sorted(threads, key=lambda kv: (kv[1].sort, kv[0])):
            height = ROW * thread.depth
            rows[(pid, tid)] = y
            out.append(f'<line x1="0" x2="{WIDTH}" y1="{y + height}" y2="{y + height}" '
                       f'class="grid"/><text x="22" y="{y + 14}" class="thread">'
                       f'{escape(short(thread.name))}</text>')
            for s in thread.slices:
                sx, sw = x(s["ts"]), max(s.get("dur", 0) * scale, 1.5)
                sy = y + s["_depth"] * ROW + 2
                name = s["name"]
                out.append(f'<rect x="{sx:.1f}" y="{sy}" width="{sw:.1f}" height="{ROW - 4}" '
                           f'rx="1" fill="{colour(name)}"><title>{escape(name)}</title></rect>')
                if sw > 7 * len(name):
                    out.append(f'<text x="{sx + 3:.1f}" y="{sy + 12}" class="slice">'
                               f'{escape(name)}</text>')
            y += height
    height = y + 10
    # Flows: from the end of the slice the start lies in to the start of the slice the end
    # binds to (Perfetto's own drawing); each slice is found on its track by the event's time.
    by_id: dict[int, dict[str, dict]] = {}  # type: ignore[type-arg]
    for e in flows:
        by_id.setdefault(e["id"], {})[e["ph"]] = e
    arrows = []
    for pair in by_id.values():
        if "s" not in pair or "f" not in pair:
            continue
        ends = []
        for ph, e in (("s", pair["s"]), ("f", pair["f"])):
            key = (e["pid"], e["tid"])
            if key not in rows:
                break
            thread = procs[e["pid"]].threads[e["tid"]]
            hit = [s for s in thread.slices if s["ts"] <= e["ts"] <= s["ts"] + s.get("dur", 0)]
            if not hit:
                break
            s = max(hit, key=lambda s: s["_depth"])
            ts = s["ts"] + s.get("dur", 0) if ph == "s" else s["ts"]
            ends.append((x(ts), rows[key] + s["_depth"] * ROW + ROW / 2))
        if len(ends) == 2:
            (ax, ay), (bx, by) = ends
            bend = max(abs(bx - ax) / 3, 12)
            arrows.append(f'<path d="M{ax:.1f},{ay:.1f} C{ax + bend:.1f},{ay:.1f} '
                          f'{bx - bend:.1f},{by:.1f} {bx:.1f},{by:.1f}" class="flow" '
                          f'marker-end="url(#head)"/>')
    marks = []
    for e in instants:
        key = (e["pid"], e["tid"])
        if key in rows:
            ix, iy = x(e["ts"]), rows[key] + 1
            marks.append(f'<path d="M{ix - 5:.1f},{iy} L{ix + 5:.1f},{iy} L{ix:.1f},{iy + 8} Z" '
                         f'class="mark"><title>{escape(e["name"])}: '
                         f'{escape(e.get("args", {}).get("message", ""))}</title></path>'
                         f'<text x="{ix + 7:.1f}" y="{iy + 8}" class="marktext">'
                         f'{escape(e["name"])}</text>')
    ticks = []
    step = nice_step((t1 - t0) / 8)
    tick = 0.0
    while tick <= t1 - t0:
        tx = x(t0 + tick)
        ticks.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{HEAD + AXIS - 6}" y2="{height}" '
                     f'class="tick"/><text x="{tx + 3:.1f}" y="{HEAD + AXIS - 10}" '
                     f'class="axis">{tick / 1000:g} ms</text>')
        tick += step
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="Roboto, Helvetica, Arial, sans-serif">',
        "<style>.proc{font-size:12px;font-weight:600;fill:#222}"
        ".thread{font-size:11px;fill:#555}.slice{font-size:10px;fill:#fff}"
        ".axis{font-size:10px;fill:#555}.tick{stroke:#d8dce3;stroke-width:1}"
        ".grid{stroke:#e4e7ec}.flow{fill:none;stroke:#333;stroke-width:1.1;opacity:.75}"
        ".mark{fill:#d62728}.marktext{font-size:10px;fill:#d62728;font-weight:600}</style>",
        '<defs><marker id="head" markerWidth="7" markerHeight="7" refX="6" refY="3.5" '
        'orient="auto"><path d="M0,0 L7,3.5 L0,7 Z" fill="#333"/></marker></defs>',
        f'<rect width="{WIDTH}" height="{height}" fill="#fff"/>',
        f'<rect width="{WIDTH}" height="{HEAD}" fill="#2d3a4a"/>'
        f'<text x="10" y="15" font-size="12" fill="#fff">{escape(title)}</text>',
        f'<line x1="{LABELS}" x2="{LABELS}" y1="{HEAD}" y2="{height}" stroke="#c9ced6"/>',
        *ticks, *out, *arrows, *marks, "</svg>", ""])


def short(name: str) -> str:
    """A thread's name without its long OS id: ``MainThread (1403...): sends, receives``."""
    head, _, rest = name.partition(" (")
    return head + (rest.partition(")")[2] if rest else "")


def nice_step(raw: float) -> float:
    """A round tick interval near ``raw`` (1, 2 or 5 times a power of ten)."""
    power = 10.0 ** len(str(int(max(raw, 1)))) / 10
    for m in (1, 2, 5, 10):
        if raw <= m * power:
            return m * power
    return 10 * power


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a pptrace export --perfetto file")
    parser.add_argument("svg", type=Path, help="where to write the picture")
    parser.add_argument("--title", default="", help="the bar's text (default: the file's name)")
    args = parser.parse_args(argv)
    args.svg.write_text(render(args.trace, args.title or args.trace.name), encoding="utf-8")
    print(f"wrote {args.svg}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
