"""What the user narrowed the view to: ranks, stages, a tensor-name glob, finding kinds, errors
only, and free text. Pure functions over the index; no Textual here.

    spec = FilterSpec.parse(ranks="0,3", stages="", name_glob="score*", kinds=(), errors_only=True)
    spec.row_visible(row), spec.cell_visible(index, row, col), spec.finding_visible(index, i)
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field, replace
from functools import cached_property

from pptrace.model.errors import ConfigError
from pptrace.model.findings import FindingKind, Severity
from pptrace.model.records import Event

from .index import Cell, Row, TraceIndex

__all__ = ["FilterSpec", "parse_ints"]

_BAD = (Cell.ERROR, Cell.MISMATCH, Cell.ORPHAN, Cell.FAILED)


def parse_ints(text: str, what: str) -> frozenset[int] | None:
    """Parse ``"0,3, 5-7"`` into a set (None for an empty string: no restriction)."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                out.update(range(int(lo), int(hi) + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ConfigError(f"{what}: expected numbers like 0,3 or 4-7, found {part!r}") from None
    return frozenset(out) if out else None


@dataclass(frozen=True)
class FilterSpec:
    """A view filter; the default shows everything."""

    ranks: frozenset[int] | None = None  # global ranks (pid when unknown)
    stages: frozenset[int] | None = None  # PP stages
    name_glob: str = ""  # tensor name glob, e.g. "score*"
    kinds: frozenset[FindingKind] | None = None
    errors_only: bool = False
    text: str = ""  # search text: names, error messages, finding messages, subject types
    _cache: dict[int, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(
        cls,
        ranks: str = "",
        stages: str = "",
        name_glob: str = "",
        kinds: tuple[FindingKind, ...] = (),
        errors_only: bool = False,
        text: str = "",
    ) -> FilterSpec:
        """Build a filter from the filter form's fields."""
        return cls(
            ranks=parse_ints(ranks, "ranks"),
            stages=parse_ints(stages, "stages"),
            name_glob=name_glob.strip(),
            kinds=frozenset(kinds) or None,
            errors_only=errors_only,
            text=text.strip(),
        )

    def with_text(self, text: str) -> FilterSpec:
        """The same filter with another search text."""
        return replace(self, text=text.strip(), _cache={})

    @property
    def active(self) -> bool:
        """True when anything is filtered."""
        return self != FilterSpec()

    def describe(self) -> str:
        """A one-line summary for the status bar ("" when nothing is filtered)."""
        parts = []
        if self.ranks is not None:
            parts.append("ranks " + ",".join(map(str, sorted(self.ranks))))
        if self.stages is not None:
            parts.append("stages " + ",".join(map(str, sorted(self.stages))))
        if self.name_glob:
            parts.append(f"name {self.name_glob}")
        if self.kinds is not None:
            parts.append("kinds " + ",".join(sorted(k.value for k in self.kinds)))
        if self.errors_only:
            parts.append("errors only")
        if self.text:
            parts.append(f"search {self.text!r}")
        return "; ".join(parts)

    @cached_property
    def _name_re(self) -> re.Pattern[str] | None:
        return re.compile(fnmatch.translate(self.name_glob)) if self.name_glob else None

    # --- predicates ----------------------------------------------------------------------
    def row_visible(self, row: Row) -> bool:
        """Rank and stage filters."""
        rank = row.rank.rank if row.rank.rank is not None else row.rank.pid
        if self.ranks is not None and rank not in self.ranks:
            return False
        return self.stages is None or row.rank.pp_rank in self.stages

    def event_matches(self, event: Event) -> bool:
        """Name glob and search text against one event."""
        pattern = self._name_re
        if pattern is not None and not any(pattern.match(t.name) for t in event.tensors):
            return False
        if self.text:
            needle = self.text.lower()
            hay = [t.name for t in event.tensors]
            hay += [event.error_message or "", event.error_type or "", event.subject_type]
            if not any(needle in h.lower() for h in hay):
                return False
        return True

    def cell_visible(self, index: TraceIndex, row: int, col: int) -> bool:
        """Whether a cell is shown bright (True) or dimmed (False)."""
        event = index.event_at(row, col)
        if event is None or not self.row_visible(index.rows[row]):
            return False
        if self.errors_only and index.rows[row].cells[col] not in _BAD:
            return False
        if self.kinds is not None:
            if not any(f.kind in self.kinds for f in index.findings_at(row, col)):
                return False
        return self.event_matches(event)

    def finding_visible(self, index: TraceIndex, i: int) -> bool:
        """Whether the findings panel lists finding ``i``."""
        cached = self._cache.get(i)
        if cached is None:
            cached = self._cache[i] = self._finding_visible(index, i)
        return cached

    def _finding_visible(self, index: TraceIndex, i: int) -> bool:
        f = index.findings[i]
        if self.kinds is not None and f.kind not in self.kinds:
            return False
        if self.errors_only and f.severity < Severity.ERROR:
            return False
        if self.ranks is not None and f.ranks and not set(f.ranks) & self.ranks:
            return False
        cells = [c for c in (index.cell_of(ref) for ref in f.events) if c is not None]
        if self.stages is not None and cells:
            if not any(index.rows[r].rank.pp_rank in self.stages for r, _ in cells):
                return False
        events = [ev for ev in (index.event_at(r, c) for r, c in cells) if ev is not None]
        pattern = self._name_re
        if pattern is not None:
            names = [t.name for ev in events for t in ev.tensors]
            if not any(pattern.match(n) for n in names):
                return False
        if self.text:
            needle = self.text.lower()
            texts = [f.message, f.kind.value, f.channel]
            texts += [t.name for ev in events for t in ev.tensors]
            texts += [ev.error_message or "" for ev in events]
            if not any(needle in t.lower() for t in texts):
                return False
        return True
