"""What differs between one PP message's send and the receive it paired with.

The values are compared by the one payload comparison (``pptrace.analyze.payload.compare``)
that an attach and its extract are compared by: a message's value is a ``TensorMeta`` named by
its key, so the same verdict says, per key, what differs (the shape, the dtype or tensor or not,
the device type, the byte count, and the content fingerprint where both sides have one; every
difference named, the byte count and the content only where the layout agrees); not the order
the keys came in, which a dict read by key does not see. Besides, for messages: the keys (a
key lost or added on the way) and the all-gather group that re-assembled TP slices (with
another group size than the sender sliced over, every sliced value differs in size by design,
so its values are listed under that one finding instead).

    for kind, message, subject in differences(pair):
        ...                                  # one finding each, on the pair's channel

Pure: no I/O.
"""

from __future__ import annotations

from pptrace.analyze.message_sides import Pair, numel
from pptrace.analyze.payload import Field, compare
from pptrace.analyze.rules import listed, who
from pptrace.model.findings import FindingKind
from pptrace.model.records import TensorMeta
from pptrace.model.text import clip, plural

__all__ = ["differences"]

K = FindingKind
Difference = tuple[FindingKind, str, str]  # (kind, one-line message, subject)


def differences(p: Pair) -> list[Difference]:
    """Every difference between ``p``'s send and its receive, in the report's order."""
    m, e = p.m, p.e
    head = p.head()
    out: list[Difference] = []
    if set(m.keys) != set(e.keys):
        got, sent_keys = set(e.keys), set(m.keys)
        lost = [k for k in m.keys if k not in got]
        extra = [k for k in e.keys if k not in sent_keys]
        parts = ([f"without {listed(lost)} that was sent"] if lost else []) + (
            [f"with {listed(extra)} that was not sent"] if extra else [])
        out.append((K.MSG_KEYS_DIFFER, f"{head}: arrived {'; '.join(parts)}",
                    f"{m.kind}:{','.join(lost)}:{','.join(extra)}"))
    regrouped = m.gather_size != e.gather_size
    if m.tensors == e.tensors and not regrouped:
        return out
    # A message is a dict its receiver reads by key, so the order its keys arrive in is no
    # finding (SGLang's own send_recv_tensor_dict puts the non-tensor values first); an
    # attach/extract's order is (order-differs), since the observer rebuilds its output in it.
    verdict = compare(m.tensors, e.tensors)
    both = [(line.left, line.right, line.differs) for line in verdict.differing
            if line.left is not None and line.right is not None]
    if not regrouped:
        for a, t, d in both:
            out += _value(head, m.kind, a, t, d)
        return out
    grown = [f"`{clip(t.key, 200)}` {a.describe()} -> {t.describe()}"
             for a, t, d in both if d & {Field.SHAPE, Field.BYTES}]
    size = f"{p.r.rank.tp_size}" if p.r.rank.tp_size is not None else "?"
    what = f": {', '.join(grown[:10])}" if grown else ""
    out.append((K.MSG_GATHER_GROUP,
                f"{head}: {who(p.s.rank)} sliced over a group of {m.gather_size}, "
                f"{who(p.r.rank)} re-assembled over an all-gather group of "
                f"{e.gather_size} (its TP size {size}){what}", m.kind))
    return out


def _value(head: str, kind: str, a: TensorMeta, t: TensorMeta,
           d: frozenset[Field]) -> list[Difference]:
    """What differs (``d``) in one key between a send (``a``) and its receive (``t``)."""
    key, subject = clip(t.key, 200), f"{kind}:{t.key}"
    out: list[Difference] = []
    if Field.DTYPE in d:
        out.append((K.MSG_DTYPE_MISMATCH,
                    f"{head}: `{key}` sent {a.describe()}, arrived {t.describe()}", subject))
    if Field.SHAPE in d:
        out.append((K.MSG_SHAPE_MISMATCH,
                    f"{head}: `{key}` sent {a.describe()}, arrived {t.describe()} "
                    f"({numel(a.shape)} elements against {numel(t.shape)})", subject))
    layout = Field.SHAPE in d or Field.DTYPE in d
    if Field.BYTES in d and not layout:
        out.append((K.MSG_BYTES_MISMATCH,
                    f"{head}: `{key}` {a.describe()} sent {plural(a.nbytes, 'byte')}, "
                    f"arrived {plural(t.nbytes, 'byte')}", subject))
    if Field.DEVICE in d:
        out.append((K.MSG_DEVICE_MISMATCH,
                    f"{head}: `{key}` {a.describe()} sent on {a.device or 'no device'}, "
                    f"arrived on {t.device or 'no device'}", subject))
    if Field.FINGERPRINT in d and not layout:
        out.append((K.MSG_CONTENT_MISMATCH,
                    f"{head}: `{key}` {a.describe()} changed on the way (fingerprint "
                    f"{(a.fingerprint or '')[:12]} sent, {(t.fingerprint or '')[:12]} arrived)",
                    subject))
    return out
