"""What a sample run is asked to do, and what each rank reports back (no torch here).

    opts = PipelineOptions(ranks=4, steps=32, fault="duplicate").resolved()
    opts.pp, opts.tp, opts.slots     # 4, 1, 5

``resolved()`` validates the layout and picks the TP size a fault needs (``tp-disagree`` runs
with two TP ranks per stage). The launcher and the CLI import this module without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pptrace.model.errors import ConfigError

from .faults import ALL_FAULTS

__all__ = [
    "EXIT_CRASH",
    "EXIT_ENGINE_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PEER_LOST",
    "EXIT_TERMINATED",
    "OUTCOMES",
    "PipelineOptions",
    "RankReport",
    "Terminated",
]

EXIT_OK = 0
EXIT_ENGINE_ERROR = 1  # the engine's transport raised in this rank
EXIT_PEER_LOST = 3  # another rank failed; this one noticed and stopped
EXIT_CRASH = 4  # a bug in the sample itself
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_TERMINATED = 143  # terminated by the launcher (SIGTERM) after its time limit

OUTCOMES = {
    EXIT_OK: "ok",
    EXIT_ENGINE_ERROR: "engine error",
    EXIT_PEER_LOST: "stopped: a peer failed",
    EXIT_CRASH: "crashed (sample bug)",
    EXIT_INTERRUPTED: "interrupted",
    EXIT_TERMINATED: "terminated by the launcher",
}

MAX_RANKS = 8
TRANSPORTS = ("auto", "sglang", "pptrace")


class Terminated(BaseException):
    """Raised in a rank process by SIGTERM, so that it still flushes its trace on the way out."""


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """One run of the sample pipeline."""

    ranks: int = 4  # world size = pp * tp
    tp: int = 1
    steps: int = 32  # microbatch decode steps (forwards) through the whole pipeline
    fault: str | None = None
    fault_at: int = 2  # the first forward a fault applies to
    out_dir: str = "pptrace-traces/demo"
    run_id: str = ""
    seed: int = 0
    batch: int = 4  # requests in microbatch slot 0 (slot m holds batch + m % 3)
    topk: int = 4
    async_depth: int = 1  # microbatch slots = pp + async_depth
    comm_timeout: float = 20.0  # gloo timeout: the longest a rank waits for a silent peer
    fingerprint: bool = True  # let pptrace hash auxiliary tensors (finds changed bytes)
    # The VPP path's layout: only the last stage's TP rank 0 attaches; its dict reaches the other
    # TP ranks by a broadcast, and each sends its copy to stage 0 as usual.
    tp_broadcast: bool = False
    # PPTRACE_* / OTEL_* variables each rank sets before its recorder starts (export, endpoint,
    # service...): passed explicitly, since a fork server started earlier has an older environment.
    env: tuple[tuple[str, str], ...] = ()
    trace: bool = True  # False: the engine's bare functions, no pptrace at all
    transport: str = "auto"  # "auto" (SGLang's module if loadable), "sglang" or "pptrace"
    store_path: str = ""  # the FileStore used for rendezvous (set by the launcher)
    # Seconds between the recorder's background writes: what a kill may lose, and how long a
    # write may wait for a CPU before what it holds is counted as dropped.
    flush_interval: float = 0.5

    @property
    def pp(self) -> int:
        """Pipeline stages."""
        return self.ranks // self.tp

    @property
    def slots(self) -> int:
        """Microbatch slots in flight: one per stage plus the async depth."""
        return self.pp + self.async_depth

    def batch_size(self, slot: int) -> int:
        """Requests in microbatch slot ``slot``: microbatches differ in size, as in the engine."""
        return self.batch + slot % 3

    def resolved(self) -> PipelineOptions:
        """Validate, and give a fault the TP size it needs; raise ConfigError on a bad layout."""
        opts = self
        if opts.fault is not None and opts.fault not in ALL_FAULTS:
            raise ConfigError(
                f"unknown fault {opts.fault!r} (see 'pptrace demo --list-faults')"
            )
        need = ALL_FAULTS[opts.fault].needs_tp if opts.fault else 1
        if opts.tp < need:
            ranks = max(opts.ranks, 2 * need)
            opts = replace(opts, tp=need, ranks=ranks + ranks % need)
        if opts.tp < 1 or opts.ranks % opts.tp:
            raise ConfigError(f"--ranks {opts.ranks} is not a multiple of --tp {opts.tp}")
        if opts.pp < 2 or opts.ranks > MAX_RANKS:
            raise ConfigError(
                f"--ranks {opts.ranks} with --tp {opts.tp}: need 2 to {MAX_RANKS} ranks "
                "and at least 2 pipeline stages"
            )
        if opts.transport not in TRANSPORTS:
            raise ConfigError(f"transport {opts.transport!r}: expected one of {TRANSPORTS}")
        if opts.tp_broadcast and opts.tp < 2:
            raise ConfigError("--tp-broadcast needs at least 2 TP ranks (--tp 2)")
        if opts.steps < 1:
            raise ConfigError("--steps must be at least 1")
        if opts.batch < 1:
            raise ConfigError("batch must be at least 1")
        return opts


@dataclass(frozen=True, slots=True)
class RankReport:
    """What one rank process says when it ends."""

    rank: int
    pp_rank: int
    tp_rank: int
    exit_code: int
    error: str | None = None  # "RuntimeError: ..." when the rank failed
    steps: int = 0  # forwards this rank completed
    recorded: int = 0  # attach/extract events pptrace recorded here
    messages: int = 0  # PP messages (sends and receives) pptrace recorded here
    exported: int = 0
    dropped: int = 0
    trace_file: str = ""  # its file, or its segments as "stem.*.otlp.jsonl (N segments)"
    transport: str = ""  # the module whose attach/extract ran (SGLang's or pptrace's)
    attached: int = 0  # last stage: outputs sent on with an auxiliary output attached

    matched: int = 0  # stage 0: outputs identical to what the last stage computed
    mismatched: int = 0
    skipped: int = 0  # stage 0: outputs whose send the last stage skipped
    first_mismatch: str | None = None
    notes: tuple[str, ...] = field(default=())
    tokens: str = ""  # a hash of every token id this rank sampled (last stage) or received (0)

    @property
    def outcome(self) -> str:
        """A short word for the exit code."""
        return OUTCOMES.get(self.exit_code, f"exit {self.exit_code}")
