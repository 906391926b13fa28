"""One rank of the sample PP sampling pipeline: the engine's data flow on gloo, traced by pptrace.

Each rank is stage ``pp_rank`` of ``pp`` (TP rank ``tp_rank`` of ``tp``) and runs the same
lock-step schedule over ``pp + async_depth`` microbatch slots. At tick ``t`` stage ``s``:

1. output phase, forward ``j = t - slots - s``: receives the output dict of forward ``j`` from
   the previous stage (stage 0 from the last stage, around the ring). Stage 0 extracts the
   auxiliary output through the instrumented extract, checks it and the sampled tokens against
   its own deterministic recomputation, feeds the tokens to the microbatch, and forwards what is
   left; stages 1..N-2 forward it; the last stage consumes it.
2. forward phase, forward ``k = t - s``: stage 0 embeds the microbatch's tokens, the others
   receive hidden states; each runs its layers. The last stage samples, its observer computes
   the auxiliary output, and a fresh output dict (``next_token_ids``, logprob values, then the
   attached auxiliary tensors) is sent to stage 0 with the ``__msg_type__`` key.

Every message a stage receives was sent at an earlier tick, and sends never block, so the schedule
cannot deadlock. Each rank wires its own pptrace ``Recorder`` (rank processes inherit nothing from
the launcher) and shuts it down on every way out, so a failing rank's error is in its trace.

    report = run_rank(opts, rank, progress=lambda rank, steps: None)
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import os
import socket
import sys
import traceback
import types
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from pptrace.engines.sglang_load import load_transport_module
from pptrace.export.sinks import build_sink
from pptrace.export.trace_file import trace_file_name
from pptrace.load.segments import segment_of
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, RankInfo
from pptrace.record.message_broadcast import wrap_broadcast
from pptrace.record.messages import MessageLog, wrap_recv, wrap_send, wrap_typed_recv
from pptrace.record.ranks import new_instance
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport

from .faults import FAULTS, MESSAGE_FAULTS
from .inject import LOOKALIKE_KEY, FaultPlan
from .model import ModelSpec, TinyDecoder, sample
from .observer import TopKObserver, TopKOutput, describe_difference
from .options import (
    EXIT_CRASH,
    EXIT_ENGINE_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PEER_LOST,
    EXIT_TERMINATED,
    PipelineOptions,
    RankReport,
    Terminated,
)
from .transport import MSG_TYPE, Link

__all__ = ["PeerLost", "Stage", "run_rank", "trace_written", "transport_module"]

Progress = Callable[[int, int], None]


class PeerLost(Exception):
    """A collective or point-to-point call failed: another rank is gone or silent."""


def transport_module(choice: str = "auto") -> types.ModuleType:
    """SGLang's transport module (``auto``: when it can be loaded), or pptrace's reference."""
    if choice != "pptrace":
        mod = load_transport_module(allow_bare=True)
        if mod is not None:
            return mod
        if choice == "sglang":
            raise RuntimeError("SGLang's transport module cannot be loaded (pip install sglang)")
    import pptrace.record.engine

    return pptrace.record.engine


def _seed(opts: PipelineOptions, k: int) -> int:
    return opts.seed * 1_000_003 + k


class Stage:
    """One rank's part of the pipeline and its schedule."""

    def __init__(
        self,
        opts: PipelineOptions,
        rank: int,
        attach: Callable[..., Any],
        extract: Callable[..., Any],
        link: Link,
        progress: Progress,
    ) -> None:
        self.opts = opts
        self.rank = rank
        self.pp_rank, self.tp_rank = divmod(rank, opts.tp)
        self.first = self.pp_rank == 0
        self.last = self.pp_rank == opts.pp - 1
        self.next_rank = ((self.pp_rank + 1) % opts.pp) * opts.tp + self.tp_rank
        self.prev_rank = ((self.pp_rank - 1) % opts.pp) * opts.tp + self.tp_rank
        self.attach, self.extract, self.link, self.progress = attach, extract, link, progress
        self.model = TinyDecoder(ModelSpec(seed=opts.seed), opts.pp)
        self.layers = self.model.stage_layers(self.pp_rank, opts.pp)
        self.observer = TopKObserver(opts.topk)
        self.plan = FaultPlan(FAULTS.get(opts.fault or ""), opts.fault_at, self.tp_rank)
        self.stage0_observer = self.plan.stage0_observer(TopKObserver(opts.topk))
        gen = torch.Generator().manual_seed(opts.seed + 1)
        self.tokens = [
            torch.randint(self.model.spec.vocab, (opts.batch_size(m),), generator=gen)
            for m in range(opts.slots)
        ]
        self.inputs: dict[int, tuple[torch.Tensor, int]] = {}  # stage 0: forward -> its input
        self.previous: dict[str, Any] | None = None  # last stage: the dict it sent last
        self.engine_error: BaseException | None = None
        self.steps = 0
        self.attached = self.matched = self.mismatched = self.skipped = 0
        self.first_mismatch: str | None = None
        self.notes: list[str] = []
        # Every token id sampled (last stage) or received (stage 0), in order: tracing on and
        # off must give the same digest (the engine's results never change).
        self.token_digest = hashlib.blake2b(digest_size=16)
        # The typed receive's stash (SGLang's _pp_tensor_dict_inbox): kind -> dicts.
        self.inbox: defaultdict[str, deque[dict[str, Any]]] = defaultdict(deque)
        self.msg_fault = opts.fault if opts.fault in MESSAGE_FAULTS else None
        self._recv_whole: tuple[bool, ...] = ()  # the wrong-gather-group fault's receive

    # --- calls that can fail -------------------------------------------------------------

    def _engine(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call the engine's (instrumented) transport; remember what it raised."""
        try:
            return fn(*args)
        except BaseException as exc:
            self.engine_error = exc
            raise

    def _comm(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            raise PeerLost(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from exc

    def recv_typed(self, expected_kind: str) -> dict[str, Any]:
        """Receive a dict of ``expected_kind`` from the previous stage, as SGLang's
        ``_pp_recv_typed_dict`` does: a stashed one first, else receive, stashing other kinds."""
        queue = self.inbox.get(expected_kind)
        if queue:
            return queue.popleft()
        while True:
            tensors: dict[str, Any] = self._comm(self.link.recv_tensor_dict, self.prev_rank,
                                                 *self._recv_whole)
            kind = tensors.get(MSG_TYPE, "default")
            if kind == expected_kind:
                return tensors
            self.inbox[kind].append(tensors)

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # --- the schedule ----------------------------------------------------------------------

    def run(self) -> None:
        """Run every tick of the schedule, then wait for the last sends."""
        opts = self.opts
        for t in range(opts.steps + opts.slots + opts.pp - 1):
            j = t - opts.slots - self.pp_rank
            if 0 <= j < opts.steps:
                self.output_phase(j)
            k = t - self.pp_rank
            if 0 <= k < opts.steps:
                self.forward_phase(k)
                self.steps = k + 1
                self.progress(self.rank, self.steps)
        self._comm(self.link.drain)
        self._comm(dist.barrier)

    def output_phase(self, j: int) -> None:
        """Receive forward ``j``'s output dict; stage 0 extracts and checks it; pass it on."""
        wrong_group = (self.msg_fault == "wrong-gather-group" and self.first
                       and j == self.opts.fault_at)
        self._recv_whole = (True,) if wrong_group else ()
        tensors = self.recv_typed("output")
        self._recv_whole = ()
        skip = bool(tensors.get("__skip__"))
        if self.first:
            if skip:
                self.skipped += 1
                self.inputs.pop(j, None)
                # As the engine does for a skipped output: placeholder tokens.
                slot = j % self.opts.slots
                self.tokens[slot] = torch.zeros(self.opts.batch_size(slot), dtype=torch.int64)
            else:
                aux = self._engine(self.extract, tensors, self.stage0_observer)
                ids = tensors["next_token_ids"]
                self.token_digest.update(ids.numpy().tobytes())
                self.check(j, aux, ids)
                self.tokens[j % self.opts.slots] = ids
        elif not skip:
            self.consume(tensors)
        if not self.last:
            send = dict(tensors)
            send[MSG_TYPE] = "output"
            if self.msg_fault == "key-dropped" and self.first and j == self.opts.fault_at:
                send.pop("next_token_logprobs", None)
            self._comm(self.link.send_tensor_dict, send, self.next_rank)

    def consume(self, tensors: dict[str, Any]) -> None:
        """A later stage's look at an output: no auxiliary key should be left in it."""
        left = sorted(k for k in tensors if k.startswith(PREFIX))
        if left:
            self._note(f"prefixed keys reached stage {self.pp_rank}: {left}")
        if self.plan.name == "prefix-lookalike" and LOOKALIKE_KEY not in tensors:
            self._note(f"{LOOKALIKE_KEY!r} never arrived (stage 0's extract popped it)")

    def check(self, j: int, aux: Any, ids: torch.Tensor) -> None:
        """Compare what arrived with a deterministic recomputation of forward ``j``."""
        tokens, position = self.inputs.pop(j)
        logits = self.model.full(tokens, position)
        want_ids = sample(logits, _seed(self.opts, j))
        diff: str | None
        if not torch.equal(ids, want_ids):
            diff = "next_token_ids differ"
        elif not isinstance(aux, TopKOutput):
            diff = f"extract returned {type(aux).__name__}"
        else:
            diff = describe_difference(aux, self.observer.observe(logits))
        if diff is None:
            self.matched += 1
        else:
            self.mismatched += 1
            if self.first_mismatch is None:
                self.first_mismatch = f"forward {j}: {diff}"

    def forward_phase(self, k: int) -> None:
        """Run forward ``k`` through this stage's layers; the last stage samples and sends."""
        opts = self.opts
        position = k // opts.slots
        if self.first:
            tokens = self.tokens[k % opts.slots]
            self.inputs[k] = (tokens, position)
            hidden = self.model.embed(tokens, position)
        else:
            proxy = self.recv_typed("proxy")
            hidden = proxy["hidden_states"]
        hidden = self.model.run_layers(hidden, self.layers)
        if not self.last:
            proxy = {"hidden_states": hidden, MSG_TYPE: "proxy"}
            if self.first and self.msg_fault == "wrong-kind-delivered" and k == opts.fault_at:
                proxy[MSG_TYPE] = "output"
            if not (self.first and self.msg_fault == "recv-hangs" and k == opts.steps - 1):
                self._comm(self.link.send_tensor_dict, proxy, self.next_rank)
            return
        logits = self.model.head(hidden)
        ids = sample(logits, _seed(opts, k))
        self.token_digest.update(ids.numpy().tobytes())
        out = self.observer.observe(logits)
        if self.opts.tp_broadcast and self.tp_rank > 0:
            # TP rank 0 attached; its dict arrives whole (as broadcast_tensor_dict delivers it).
            tensors = self._comm(self.link.broadcast_tensor_dict, None)
        else:
            tensors = self.plan.fresh_dict(k, self.previous)
            tensors["next_token_ids"] = ids
            tensors["next_token_logprobs"] = torch.log_softmax(logits, -1).gather(
                1, ids[:, None])[:, 0]
            # A plain list travels whole inside the metadata, as the engine's logprob lists do.
            tensors["extend_logprob_start_len_per_req"] = [0] * len(ids)
            self._engine(self.attach, tensors, self.plan.output_for(k, out, ids))
            self.previous = tensors
            self.plan.after_attach(k, tensors, out)
            if self.opts.tp_broadcast:
                self._comm(self.link.broadcast_tensor_dict, tensors)
        self.attached += 1
        send = self.plan.to_send(k, tensors)
        if self.msg_fault == "tp-slice-not-replicated" and self.tp_rank > 0 and k == opts.fault_at:
            send = dict(send)  # this TP rank's copy differs: not replicated, yet sent as slices
            send["next_token_logprobs"] = send["next_token_logprobs"] + 1e-3
        send_dict = self.link.send_tensor_dict
        if self.msg_fault == "wrong-gather-group" and k == opts.fault_at:
            send_dict = functools.partial(send_dict, gather=1)  # this kind: no all-gather group
        self._comm(send_dict, send, self.next_rank)


def _rank_info(opts: PipelineOptions, rank: int) -> RankInfo:
    pp_rank, tp_rank = divmod(rank, opts.tp)
    return RankInfo(
        rank=rank, world_size=opts.ranks, pp_rank=pp_rank, pp_size=opts.pp,
        tp_rank=tp_rank, tp_size=opts.tp, host=socket.gethostname(), pid=os.getpid(),
        instance=new_instance(),  # as a recorder that discovers its rank draws one
    )


def _tp_group(opts: PipelineOptions, pp_rank: int) -> Any:
    """Create every stage's TP group (all ranks must take part) and return this stage's."""
    mine = None
    for stage in range(opts.pp):
        group = dist.new_group([stage * opts.tp + i for i in range(opts.tp)])
        if stage == pp_rank:
            mine = group
    return mine


def _trace_messages(stage: Stage, log: MessageLog) -> None:
    """Send, receive and broadcast through pptrace's message-layer wrappers, as the engine's
    ``GroupCoordinator`` and typed receive are wrapped (the link's methods, on the instance)."""
    link, tp = stage.link, stage.opts.tp

    def peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int | None, int]:
        # (tensors, dst) or (src[, sent_whole]): the rank is the one integer argument.
        found = next((a for a in args if type(a) is int), None)
        rank = int(found if found is not None else kwargs.get("dst", kwargs.get("src", -1)))
        gather = kwargs.get("gather")
        return rank, rank // tp, tp if gather is None else int(gather)

    def prev(_args: tuple[Any, ...], _kwargs: dict[str, Any]) -> tuple[int, int | None, int]:
        return stage.prev_rank, stage.prev_rank // tp, tp

    link.send_tensor_dict = wrap_send(link.send_tensor_dict, log, peer,  # type: ignore[method-assign]
                                      dict_arg=0, dict_name="tensors")
    link.recv_tensor_dict = wrap_recv(link.recv_tensor_dict, log, peer)  # type: ignore[method-assign]
    stage.recv_typed = wrap_typed_recv(  # type: ignore[method-assign]
        stage.recv_typed, log, lambda a, kw: str(a[0] if a else kw["expected_kind"]), prev)
    if tp > 1:
        # The stage's TP group, TP rank 0 the source: as broadcast_tensor_dict is recorded.
        members = tuple(stage.pp_rank * tp + i for i in range(tp))
        link.broadcast_tensor_dict = wrap_broadcast(  # type: ignore[method-assign]
            link.broadcast_tensor_dict, log, lambda a, kw: (members, 0, stage.tp_rank),
            dict_arg=0, dict_name="tensors")


def trace_written(out_dir: str, info: RankInfo) -> str:
    """The trace this process wrote, as the demo's table names it: its file, compressed or not
    (``pptrace-rank0-pid7.otlp.jsonl.gz``), or its segments (``pptrace-rank0-pid7.*.otlp.jsonl``
    and how many are on disk) when it rotated."""
    stem = trace_file_name(info).removesuffix(".otlp.jsonl")
    try:
        found = [(seg, name) for name in sorted(os.listdir(out_dir))
                 if (seg := segment_of(name)) is not None and seg.process[1] == stem]
    except OSError:
        found = []
    if not found:
        return os.path.join(out_dir, trace_file_name(info))
    if len(found) == 1:
        return os.path.join(out_dir, found[0][1])
    return os.path.join(out_dir, f"{stem}.*{found[-1][0].ending} ({len(found)} segments)")


def run_rank(opts: PipelineOptions, rank: int, progress: Progress) -> RankReport:
    """Run one rank to its end (success or failure) and report; never raises."""
    torch.set_num_threads(1)
    info = _rank_info(opts, rank)
    os.environ.update(dict(opts.env))
    # The same PPTRACE_* / OTEL_* variables as an engine under pptrace run (export, mode...);
    # what the demo's own options decide wins.
    cfg = Config.from_env(trace_dir=opts.out_dir, run_id=opts.run_id,
                          fingerprint=opts.fingerprint, flush_interval=opts.flush_interval,
                          enabled=opts.trace)
    # OTLP's own losses (a collector down) are counted as OTLP's, in the trace's stats spans.
    recorder = Recorder(cfg, sink_factory=lambda r: build_sink(
        cfg, r, on_drop=lambda n, cause: recorder.exporter_dropped(n, cause),
        stats=lambda: recorder.stats()),
        rank_provider=lambda: (info, True))
    mod = transport_module(opts.transport)
    attach = mod.add_auxiliary_output_to_pp_tensors
    extract = mod.pop_auxiliary_output_from_pp_tensors
    if opts.trace:
        recorder.start()
        attach, extract = wrap_transport(attach, extract, recorder)
    stage: Stage | None = None
    code, error = EXIT_OK, None
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{opts.store_path}", rank=rank, world_size=opts.ranks,
            timeout=datetime.timedelta(seconds=opts.comm_timeout),
        )
        tp_group = _tp_group(opts, info.pp_rank or 0) if opts.tp > 1 else None
        link = Link(opts.tp, info.tp_rank or 0, tp_group, tp_root=(info.pp_rank or 0) * opts.tp)
        stage = Stage(opts, rank, attach, extract, link, progress)
        if opts.trace:
            _trace_messages(stage, MessageLog(recorder))
        stage.run()
        dist.destroy_process_group()
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        if stage is not None and exc is stage.engine_error:
            code = EXIT_ENGINE_ERROR
        elif isinstance(exc, PeerLost) or (stage is None and isinstance(exc, RuntimeError)):
            code = EXIT_PEER_LOST
        elif isinstance(exc, Terminated):
            code = EXIT_TERMINATED
        elif isinstance(exc, KeyboardInterrupt):
            code = EXIT_INTERRUPTED
        else:
            code = EXIT_CRASH
            traceback.print_exc(file=sys.stderr)
    finally:
        if opts.trace:
            recorder.shutdown()
    stats = recorder.stats()
    return RankReport(
        rank=rank, pp_rank=info.pp_rank or 0, tp_rank=info.tp_rank or 0, exit_code=code,
        error=error, steps=stage.steps if stage else 0, recorded=stats.recorded,
        messages=stats.messages_recorded,
        exported=stats.exported, dropped=stats.dropped,
        trace_file=trace_written(opts.out_dir, info), transport=mod.__name__,
        attached=stage.attached if stage else 0,
        matched=stage.matched if stage else 0, mismatched=stage.mismatched if stage else 0,
        skipped=stage.skipped if stage else 0,
        first_mismatch=stage.first_mismatch if stage else None,
        notes=tuple(stage.notes) if stage else (),
        tokens=stage.token_digest.hexdigest() if stage else "",
    )
