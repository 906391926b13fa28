"""The analyzer's rules for one event or one pair of events: pure functions, no state.

- ``classify_error``: the finding kind of a call that raised, by the engine's exact message;
- ``hygiene_specs``: the namespace findings one event gives (prefixed keys, engine-key names,
  empty names, names carrying the prefix, keys left after an extract, extracts off stage 0);
- ``compare_specs``: what differs between an attach and the extract it paired with;
- ``ENGINE_KEYS``: the keys the engines themselves put in the PP output dict (their adapters').

``pptrace.analyze.analyzer`` applies them across ranks, once per distinct event shape.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pptrace import engines
from pptrace.analyze.payload import Field, compare
from pptrace.model import errors
from pptrace.model.findings import FindingKind, Severity
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, TensorMeta
from pptrace.model.target import PREFIX_ENDS
from pptrace.model.text import clip
from pptrace.model.trace import ProcessTrace

__all__ = [
    "ENGINE_KEYS",
    "NEAR_PREFIX",
    "Spec",
    "classify_error",
    "compare_specs",
    "hygiene_specs",
    "listed",
    "near_prefix",
    "rank_id",
    "run_of",
    "runs_of",
    "stage_of",
    "tensor_names",
    "tp_of",
    "transport_prefix",
    "who",
]

K = FindingKind

#: Keys the engines themselves put in the PP output dict (each adapter's reserved keys,
#: pptrace.engines): an auxiliary name equal to one is a collision.
ENGINE_KEYS = engines.reserved_keys()

#: A key that starts like the prefix without being prefixed: stage 0 will not pop it, but it
#: is one typo away from a wrong pop (the default transport's; ``near_prefix`` for any).
NEAR_PREFIX = PREFIX.rstrip(".")


def near_prefix(prefix: str) -> str:
    """What a key that only looks like ``prefix`` starts with: the prefix without its ending
    separators (the prefix itself when nothing else is left)."""
    return prefix.rstrip(PREFIX_ENDS) or prefix


def transport_prefix(proc: ProcessTrace) -> str:
    """The key prefix a process's transport used, as its trace records it; a trace that
    records none (older, or nothing learnt it) used the default transport's."""
    stats = proc.stats
    return stats.prefix if stats is not None and stats.prefix is not None else PREFIX

_ATTACH_EXACT = {
    errors.ATTACH_NOT_PP: K.ATTACH_NOT_PP,
    errors.ATTACH_EMPTY: K.ATTACH_EMPTY,
    errors.ATTACH_BAD_NAME: K.ATTACH_BAD_NAME,
}
_EXTRACT_EXACT = {
    errors.EXTRACT_NO_OBSERVER: K.EXTRACT_NO_OBSERVER,
    errors.EXTRACT_NOT_PP: K.EXTRACT_NOT_PP,
    errors.EXTRACT_NOT_TENSOR: K.EXTRACT_NOT_TENSOR,
    errors.EXTRACT_NOT_RECONSTRUCTED: K.EXTRACT_NOT_RECONSTRUCTED,
}


def _pattern(template: str) -> re.Pattern[str]:
    head, _, tail = template.partition("{name!r}")
    return re.compile(re.escape(head) + r"(.+)" + re.escape(tail) + r"\Z", re.DOTALL)


_ATTACH_PATTERNS = (
    (_pattern(errors.ATTACH_NOT_TENSOR), K.ATTACH_NOT_TENSOR),
    (_pattern(errors.ATTACH_DUPLICATE), K.ATTACH_DUPLICATE),
)


def classify_error(ev: Event) -> FindingKind:
    """The finding kind of a call that raised: the engine's error by its exact message."""
    if ev.error_type not in ("RuntimeError", "builtins.RuntimeError"):
        return K.CALL_RAISED
    msg = ev.error_message or ""
    if ev.direction is Direction.ATTACH:
        kind = _ATTACH_EXACT.get(msg)
        if kind is not None:
            return kind
        for pattern, kind in _ATTACH_PATTERNS:
            if pattern.match(msg):
                return kind
        return K.CALL_RAISED
    return _EXTRACT_EXACT.get(msg, K.CALL_RAISED)


# --- naming ----------------------------------------------------------------------------------


def who(rank: RankInfo) -> str:
    """``rank 3``, or ``pid 1234`` when the global rank is unknown."""
    return f"rank {rank.rank}" if rank.rank is not None else f"pid {rank.pid}"


def rank_id(rank: RankInfo) -> int:
    return rank.rank if rank.rank is not None else rank.pid


#: The most names a message lists (a span may carry a million tensors), and the most
#: characters of one name it quotes.
NAMES_SHOWN = 10
NAME_LIMIT = 200


def listed(items: Sequence[str], quote: str = "`") -> str:
    """The first ``NAMES_SHOWN`` items, quoted and comma-separated, then how many more."""
    shown = [f"{quote}{clip(item, NAME_LIMIT)}{quote}" for item in items[:NAMES_SHOWN]]
    if len(items) > NAMES_SHOWN:
        shown.append(f"and {len(items) - NAMES_SHOWN} more")
    return ", ".join(shown)


def tensor_names(tensors: Sequence[TensorMeta]) -> str:
    """```a`, `b`` (the first ``NAMES_SHOWN``, then how many more), or ``nothing``."""
    return listed([t.name for t in tensors]) or "nothing"


def run_of(proc: ProcessTrace) -> str:
    """The run id a process's trace belongs to (from its first event, else its stats)."""
    if proc.events:
        return proc.events[0].run_id
    return proc.stats.run_id if proc.stats is not None else ""


def runs_of(procs: Sequence[ProcessTrace]) -> list[str]:
    """Each process's run id; one that names none joins the one run the others name."""
    runs = [run_of(p) for p in procs]
    known = set(runs) - {""}
    if len(known) != 1:
        return runs
    # A process with neither events nor stats (a middle stage killed before its first stats
    # span) names no run: taken for another run, its channels would stand apart.
    return [run or next(iter(known)) for run in runs]


def stage_of(rank: RankInfo) -> str:
    return f"pp{rank.pp_rank}" if rank.pp_rank is not None else "pp?"


def tp_of(rank: RankInfo) -> int:
    return rank.tp_rank if rank.tp_rank is not None else 0


# kind, message template ({label}, {seq}), subject, severity override
Spec = tuple[FindingKind, str, str, "Severity | None"]


def _esc(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def hygiene_specs(ev: Event, pp_rank: int | None, prefix: str = PREFIX) -> tuple[Spec, ...]:
    """The namespace findings one event gives, as templates (pure; cached per event shape);
    ``prefix``: the process's own (``transport_prefix``)."""
    out: list[Spec] = []
    near = near_prefix(prefix)
    engine_keys = ENGINE_KEYS | {k for k in ev.keys_before if not k.startswith(prefix)}
    verb = "attached" if ev.direction is Direction.ATTACH else "extracted"
    for t in ev.tensors:
        name, key = _esc(t.name), _esc(t.key)
        if t.name == "":
            out.append((K.EMPTY_NAME, f"{{label}} {verb} an auxiliary tensor with an empty name "
                        f"(key `{key}`)", "", None))
        elif t.name in engine_keys:
            out.append((K.RESERVED_NAME, f"{{label}} {verb} auxiliary name `{name}`, which is "
                        "also an engine key of the PP output dict", t.name, None))
        elif t.name.startswith(prefix) or t.name.startswith(near):
            out.append((K.NAME_HAS_PREFIX, f"{{label}} {verb} auxiliary name `{name}`, which "
                        f"itself carries the prefix (key `{key}`)", t.name, None))
    if ev.direction is Direction.ATTACH:
        duplicate = not ev.ok and classify_error(ev) is K.ATTACH_DUPLICATE
        keys = () if duplicate else ev.keys_before
        where = "already in the dict before attach"
    else:
        keys = ev.keys_before
        where = "in the dict stage 0 received"
    for k in keys:
        if k.startswith(prefix) and ev.direction is Direction.ATTACH:
            out.append((K.PREFIXED_FOREIGN_KEY, f"{{label}}: key `{_esc(k)}` was {where}: stage "
                        f"0 will pop it as auxiliary output `{_esc(k[len(prefix):])}`", k, None))
        elif k.startswith(near) and not k.startswith(prefix):
            out.append((K.PREFIXED_FOREIGN_KEY, f"{{label}}: key `{_esc(k)}` {where} starts like "
                        f"the auxiliary prefix `{_esc(prefix)}` without being auxiliary output",
                        k, Severity.WARNING))
    if ev.direction is Direction.EXTRACT and ev.ok and ev.tensors:
        left = [k for k in ev.keys_after if k.startswith(prefix)]
        if left:
            out.append((K.LEFTOVER_KEYS, "{label} extract #{seq} succeeded but left prefixed keys "
                        + _esc(listed(left)) + " in the dict", "", None))
    if ev.direction is Direction.EXTRACT and ev.tensors and pp_rank is not None and pp_rank != 0:
        out.append((K.EXTRACT_OFF_STAGE0, f"{{label}} (pp {pp_rank}) extracted auxiliary output "
                    f"{_esc(tensor_names(ev.tensors))}: only stage 0 should (was it forwarded past "
                    "stage 0?)", "", None))
    return tuple(out)


def compare_specs(
    ls: str, rs: str, a: Event, e: Event, prefix: str = PREFIX
) -> tuple[tuple[FindingKind, str, str], ...]:
    """What differs between an attach and the extract it paired with (pure), as findings
    (``prefix``: the attaching process's own, ``transport_prefix``).

    ``pptrace.analyze.payload.compare`` decides what differs; this names it. A byte count or a
    content fingerprint that differs along with the shape or dtype is not reported again.
    """
    if a.tensors == e.tensors:
        return ()
    verdict = compare(a.tensors, e.tensors)
    out: list[tuple[FindingKind, str, str]] = []
    foreign = {k[len(prefix):] for k in a.keys_before if k.startswith(prefix)}
    missing = verdict.missing
    # A name popped from a key written under the prefix before attach is a namespace finding
    # of the attach (``hygiene_specs``), not a difference of the pair.
    extra = [t for t in verdict.extra if t.name not in foreign]
    if extra and not missing:
        # Everything attached arrived, plus prefixed keys no attach wrote: someone stored
        # a non-auxiliary value under the prefix and stage 0 popped it as auxiliary output.
        for t in extra:
            out.append((K.PREFIXED_FOREIGN_KEY,
                        f"{rs} extracted `{t.name}` ({t.describe()}) that no attach inserted "
                        f"({ls} attached {tensor_names(a.tensors)}): key `{t.key}` was written "
                        "under the prefix outside attach and popped as auxiliary output", t.key))
    elif missing:
        parts = [f"missing at stage 0: {tensor_names(missing)}"]
        if extra:
            parts.append(f"not attached: {tensor_names(extra)}")
        out.append((K.NAMES_DIFFER,
                    f"{ls} attached {tensor_names(a.tensors)}; {rs} extracted "
                    f"{tensor_names(e.tensors)} ({'; '.join(parts)})", ""))
    if verdict.order_differs:
        out.append((K.ORDER_DIFFERS,
                    f"{ls} attached in order {listed(verdict.left_order, '')}; {rs} extracted "
                    f"in order {listed(verdict.right_order, '')}", ""))
    for line in verdict.differing:
        x, y, d = line.left, line.right, line.differs
        if x is None or y is None:
            continue
        name = line.name
        side = f"{ls} attached `{_esc(name)}` {{}}; {rs} extracted {{}}"  # name is a template
        if Field.SHAPE in d:
            out.append((K.SHAPE_MISMATCH, side.format(x.describe(), y.describe()), name))
        if Field.DTYPE in d:
            out.append((K.DTYPE_MISMATCH, side.format(x.describe(), y.describe()), name))
        layout = Field.SHAPE in d or Field.DTYPE in d
        if Field.BYTES in d and not layout:
            out.append((K.BYTES_MISMATCH,
                        side.format(f"{x.describe()} ({x.nbytes} bytes)", f"{y.nbytes} bytes"),
                        name))
        if Field.DEVICE in d:
            out.append((K.DEVICE_TYPE_MISMATCH,
                        side.format(f"on {x.device}", f"on {y.device}"), name))
        if Field.FINGERPRINT in d and not layout:
            out.append((K.CONTENT_MISMATCH,
                        side.format(f"with content {_short(x.fingerprint)}",
                                    f"content {_short(y.fingerprint)}"), name))
    return tuple(out)


def _short(fingerprint: str | None) -> str:
    return (fingerprint or "")[:12]
