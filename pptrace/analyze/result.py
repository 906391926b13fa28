"""What an analysis hands back (``pptrace.analyze.analyzer.analysis``): the findings, what they
were judged on, and the trace on one clock that every display shows. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pptrace.analyze.aligned import Clocks
from pptrace.analyze.channels import Channel
from pptrace.analyze.pairs import Pairs
from pptrace.model.findings import Finding, MessageId
from pptrace.model.trace import Trace

__all__ = ["Analysis"]


@dataclass(frozen=True, slots=True)
class Analysis:
    """The findings, the channels they were judged on, each channel's attach/extract pairs and
    each send's receive (for the viewer and the Perfetto export, which pair nothing), and the
    trace they were judged on: its wall-clock times on one clock (``clocks``: the offsets
    applied, ``pptrace.analyze.aligned``), which every display shows."""

    findings: tuple[Finding, ...]
    channels: tuple[Channel, ...]
    message_pairs: Mapping[MessageId, MessageId] = field(default_factory=dict)
    pairs: Pairs = field(default_factory=Pairs)
    #: each broadcast's send -> the receive it reached on each other member of its group
    broadcast_pairs: Mapping[MessageId, tuple[MessageId, ...]] = field(default_factory=dict)
    trace: Trace = field(default_factory=lambda: Trace(processes=()))
    clocks: Clocks = field(default_factory=lambda: Clocks(()))
