"""The shipper's state file: where it is in each trace file, and what it delivered and lost.

One JSON file in the trace directory (``pptrace.export.ship_launch.STATE_NAME``), rewritten
whole (a temporary file renamed over it) after each request. It is both the shipper's memory
across a restart and the user's record of OTLP delivery, per trace file:

- ``offset``/``lines``: the position of the next line to ship (``pptrace.ship.tail.Position``);
- ``pending``: a request in flight (its end position and counts), written *before* it is
  posted: a shipper that dies during a post leaves it, and the next one counts it lost (the
  collector may have it: it is never sent twice) and goes on after it;
- ``events_sent``/``messages_sent``/``stats_sent``, ``events_lost``/``messages_lost`` and
  ``causes`` (events and messages lost, by cause).

    state = ShipState.load(path)
    state.files["pptrace-rank0-pid42.otlp.jsonl"].events_sent
    state.save(path)
"""

from __future__ import annotations

import collections
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["FileState", "ShipState", "summary_line"]


@dataclass(slots=True)
class FileState:
    """One trace file's position and counts (mutable: the shipper updates it as it goes)."""

    offset: int = 0
    lines: int = 0
    inode: int = 0
    pending: list[int] | None = None  # [offset, lines, events, messages] of a post in flight
    events_sent: int = 0
    messages_sent: int = 0
    stats_sent: int = 0
    events_lost: int = 0
    messages_lost: int = 0
    skipped: int = 0  # spans of the file that did not decode (never posted)
    causes: dict[str, int] = field(default_factory=dict)
    final: bool = False  # a final stats span was read
    damaged: str = ""  # why the file is read no further
    gone: bool = False  # deleted (rotation) before it was read to its end

    def lose(self, events: int, messages: int, cause: str) -> None:
        """Count events and messages lost for ``cause``."""
        self.events_lost += events
        self.messages_lost += messages
        if events + messages:
            self.causes[cause] = self.causes.get(cause, 0) + events + messages


@dataclass(slots=True)
class ShipState:
    """Every file's state, and the shipper's own facts (endpoint, pid, whether it runs)."""

    files: dict[str, FileState] = field(default_factory=dict)
    endpoint: str = ""
    pid: int = 0
    running: bool = False

    @classmethod
    def load(cls, path: str) -> ShipState:
        """The state at ``path`` (an empty one when there is none, or it is unreadable)."""
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
            files = {str(name): FileState(**{k: v for k, v in entry.items()
                                             if k in FileState.__dataclass_fields__})
                     for name, entry in raw.get("files", {}).items()}
            return cls(files, str(raw.get("endpoint", "")), int(raw.get("pid", 0)),
                       bool(raw.get("running", False)))
        except (OSError, ValueError, TypeError, AttributeError):
            return cls()

    def save(self, path: str) -> None:
        """Write the state whole (never a torn file: a rename over the old one)."""
        tmp = f"{path}.{os.getpid()}.tmp"
        data: dict[str, Any] = {"endpoint": self.endpoint, "pid": self.pid,
                                "running": self.running,
                                "files": {n: asdict(s) for n, s in sorted(self.files.items())},
                                "totals": self.totals()}
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)

    def totals(self) -> dict[str, Any]:
        """The counts of every file together."""
        keys = ("events_sent", "messages_sent", "stats_sent", "events_lost", "messages_lost",
                "skipped")
        out: dict[str, Any] = {k: sum(getattr(s, k) for s in self.files.values()) for k in keys}
        causes: collections.Counter[str] = collections.Counter()
        for s in self.files.values():
            causes.update(s.causes)
        out["causes"] = dict(causes)
        out["files_gone"] = sum(s.gone for s in self.files.values())
        out["files_damaged"] = sum(bool(s.damaged) for s in self.files.values())
        return out


def summary_line(state: ShipState) -> str:
    """The closing line when something was lost (empty when everything arrived)."""
    t = state.totals()
    lost = t["events_lost"] + t["messages_lost"]
    if not (lost or t["files_gone"] or t["files_damaged"] or t["skipped"]):
        return ""
    why = ", ".join(f"{n} {cause}" for cause, n in sorted(t["causes"].items(),
                                                          key=lambda kv: -kv[1])) or "see below"
    parts = [f"{t['events_sent']} events and {t['messages_sent']} messages delivered",
             f"{t['events_lost']} events and {t['messages_lost']} messages lost ({why})"]
    if t["files_gone"]:
        parts.append(f"{t['files_gone']} segments deleted by rotation before shipped")
    if t["files_damaged"]:
        parts.append(f"{t['files_damaged']} files unreadable")
    if t["skipped"]:
        parts.append(f"{t['skipped']} spans undecodable")
    return f"pptrace: OTLP shipper ({state.endpoint}): {'; '.join(parts)}"
