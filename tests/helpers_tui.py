"""A small record factory for the viewer's tests and benchmark: traces built from records directly.

    trace, findings = scenario("dtype-mismatch")
    trace = synthetic(100_000, pp=4, tp=2)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pptrace.model.findings import Finding, FindingKind
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, TensorMeta
from pptrace.model.trace import EventId, ProcessTrace, Trace

T0 = 1_790_000_000_000_000_000  # a fixed wall clock, so screenshots are stable
STEP = 1_000_000  # 1 ms between microbatches
ENGINE_KEYS = ("next_token_ids",)


def tensor(name: str, shape: tuple[int, ...] = (8, 5), dtype: str = "float32",
           device: str = "cpu", fingerprint: str | None = None) -> TensorMeta:
    """One auxiliary tensor's metadata."""
    size = {"float32": 4, "float16": 2, "int64": 8, "bfloat16": 2}.get(dtype, 4)
    n = 1
    for d in shape:
        n *= d
    return TensorMeta(name=name, key=PREFIX + name, shape=shape, dtype=dtype, device=device,
                      nbytes=n * size, fingerprint=fingerprint)


def rank(global_rank: int, pp: int, tp: int, pp_size: int, tp_size: int) -> RankInfo:
    """A rank with a full PP/TP layout."""
    return RankInfo(rank=global_rank, world_size=pp_size * tp_size, pp_rank=pp, pp_size=pp_size,
                    tp_rank=tp, tp_size=tp_size, host="node0", pid=1000 + global_rank)


def attach(r: RankInfo, seq: int, tensors: tuple[TensorMeta, ...], *, t: int | None = None,
           error: tuple[str, str] | None = None) -> Event:
    """An attach on the last stage."""
    keys = tuple(m.key for m in tensors)
    return Event(
        direction=Direction.ATTACH, seq=seq, rank=r,
        start_ns=T0 + seq * STEP + 10 + (r.tp_rank or 0) if t is None else t,
        mono_ns=seq * STEP, duration_ns=2_000, subject_type="obs.ScoresOutput",
        subject_pp_capable=True, tensors=tensors, keys_before=ENGINE_KEYS,
        keys_after=ENGINE_KEYS + (keys if error is None else ()),
        error_type=error[0] if error else None, error_message=error[1] if error else None,
        run_id="run1",
    )


def extract(r: RankInfo, seq: int, tensors: tuple[TensorMeta, ...], *, t: int | None = None,
            error: tuple[str, str] | None = None) -> Event:
    """An extract on stage 0."""
    keys = tuple(m.key for m in tensors)
    return Event(
        direction=Direction.EXTRACT, seq=seq, rank=r,
        start_ns=T0 + seq * STEP + 500 + (r.tp_rank or 0) if t is None else t,
        mono_ns=seq * STEP, duration_ns=3_000, subject_type="obs.ScoresObserver",
        subject_pp_capable=True, tensors=tensors, keys_before=ENGINE_KEYS + keys,
        keys_after=ENGINE_KEYS if error is None else ENGINE_KEYS + keys,
        returned_none=not tensors or error is not None,
        error_type=error[0] if error else None, error_message=error[1] if error else None,
        run_id="run1",
    )


Tweak = Callable[[int, int, tuple[TensorMeta, ...]], tuple[TensorMeta, ...]]


def pipeline(microbatches: int, *, pp: int = 2, tp: int = 1,
             payload: tuple[TensorMeta, ...] = (tensor("scores"), tensor("routing", (8,), "int64")),
             on_extract: Tweak | None = None, orphans: int = 0) -> Trace:
    """A healthy run: the last stage attaches, stage 0 extracts, middle stages record nothing.

    ``on_extract(tp, seq, tensors)`` changes what stage 0 receives; ``orphans`` extra attaches at
    the end of the last stage are never extracted."""
    procs = []
    for p in range(pp):
        for t in range(tp):
            r = rank(p * tp + t, p, t, pp, tp)
            if p == pp - 1:
                events = tuple(attach(r, s, payload) for s in range(microbatches + orphans))
            elif p == 0:
                events = tuple(
                    extract(r, s, on_extract(t, s, payload) if on_extract else payload)
                    for s in range(microbatches)
                )
            else:
                events = ()
            procs.append(ProcessTrace(rank=r, events=events, sources=(f"rank{r.rank}.jsonl",)))
    return Trace(processes=tuple(procs), sources=tuple(f"rank{i}.jsonl" for i in range(pp * tp)))


def finding(kind: FindingKind, message: str, events: tuple[EventId, ...] = (),
            ranks: tuple[int, ...] = (), microbatch: int | None = None,
            time_ns: int | None = None, channel: str = "pp0<-pp1/tp0") -> Finding:
    """A finding with the kind's default severity."""
    return Finding(kind=kind, severity=kind.default_severity, message=message, ranks=ranks,
                   microbatch=microbatch, time_ns=time_ns, events=events, channel=channel)


def ids(process_a: int, seq_a: int, process_e: int, seq_e: int) -> tuple[EventId, EventId]:
    """The (attach, extract) event ids of one pair."""
    return (EventId(process_a, Direction.ATTACH, seq_a),
            EventId(process_e, Direction.EXTRACT, seq_e))


def scenario(name: str) -> tuple[Trace, list[Finding]]:
    """Named traces for tests and screenshots (pp=2, tp=1: process 0 extracts, 1 attaches)."""
    if name == "healthy":
        return pipeline(12), []
    if name == "dtype-mismatch":
        def half(tp: int, seq: int, ts: tuple[TensorMeta, ...]) -> tuple[TensorMeta, ...]:
            return (tensor("scores", dtype="float16"),) + ts[1:] if seq in (5, 9) else ts
        trace = pipeline(12, on_extract=half, orphans=1)
        findings = [
            finding(FindingKind.DTYPE_MISMATCH,
                    f"rank 1 attached `scores` float32[8, 5]; rank 0 extracted float16[8, 5] "
                    f"(microbatch {s})", ids(1, s, 0, s), (1, 0), s, T0 + s * STEP + 10)
            for s in (5, 9)
        ]
        findings.append(finding(FindingKind.ORPHAN_ATTACH, "rank 1 attached microbatch 12; "
                                "stage 0 never extracted it", (EventId(1, Direction.ATTACH, 12),),
                                (1,), 12, T0 + 12 * STEP + 10))
        return trace, findings
    if name == "engine-error":
        trace = pipeline(6)
        procs = list(trace.processes)
        r0 = procs[0].rank
        events = list(procs[0].events)
        events[3] = extract(r0, 3, events[3].tensors, error=(
            "builtins.RuntimeError", "received auxiliary PP output without a sampling observer"))
        procs[0] = ProcessTrace(rank=r0, events=tuple(events), sources=procs[0].sources)
        trace = Trace(processes=tuple(procs), sources=trace.sources)
        return trace, [finding(FindingKind.EXTRACT_NO_OBSERVER,
                               "rank 0 received auxiliary PP output without a sampling observer",
                               ids(1, 3, 0, 3), (1, 0), 3, T0 + 3 * STEP + 10)]
    if name == "markup":
        evil_name = "[bold red]pwned[/] [link=https://evil.example]x[/link]"
        evil_error = "[/]boom [b]not bold[/b] \x1b[31mred?\x1b[0m"
        payload = (tensor(evil_name),)
        trace = pipeline(3, payload=payload)
        procs = list(trace.processes)
        r0 = procs[0].rank
        events = list(procs[0].events)
        events[1] = extract(r0, 1, payload, error=("builtins.RuntimeError", evil_error))
        procs[0] = ProcessTrace(rank=r0, events=tuple(events), sources=procs[0].sources)
        trace = Trace(processes=tuple(procs), sources=trace.sources)
        return trace, [finding(FindingKind.CALL_RAISED, f"rank 0 raised: {evil_error} on "
                               f"{evil_name}", ids(1, 1, 0, 1), (1, 0), 1, T0 + STEP)]
    if name == "tp-disagree":
        # pp2 x tp2 (processes: 0 pp0/tp0, 1 pp0/tp1, 2 pp1/tp0, 3 pp1/tp1). At microbatch 2 the
        # last stage's TP ranks attach different contents; stage 0 then receives a mix.
        ok = tensor("scores", fingerprint="b2:aaaa")

        def other(fp: str) -> tuple[TensorMeta, ...]:
            return (tensor("scores", fingerprint=fp),)
        procs = []
        for p in range(2):
            for t in range(2):
                r = rank(p * 2 + t, p, t, 2, 2)
                if p == 1:
                    events = tuple(attach(r, s, other("b2:bbbb") if (s, t) == (2, 1) else (ok,))
                                   for s in range(6))
                else:
                    events = tuple(extract(r, s, other("b2:cccc") if s == 2 else (ok,))
                                   for s in range(6))
                procs.append(ProcessTrace(rank=r, events=events))
        trace = Trace(processes=tuple(procs))
        cause = finding(FindingKind.TP_DISAGREE, "rank 2 (tp 0) attached `scores` content "
                        "b2:aaaa; rank 3 (tp 1) attached `scores` content b2:bbbb for "
                        "microbatch 2", (EventId(2, Direction.ATTACH, 2),
                                         EventId(3, Direction.ATTACH, 2)),
                        (2, 3), 2, T0 + 2 * STEP + 10, "pp1/tp0~tp1")
        effects = [replace(finding(FindingKind.CONTENT_MISMATCH, f"rank {2 + t} attached "
                                   f"`scores` with content b2:{'ab'[t] * 4}; rank {t} extracted "
                                   "content b2:cccc", ids(2 + t, 2, t, 2), (2 + t, t), 2,
                                   T0 + 2 * STEP + 10, f"pp0<-pp1/tp{t}"), cause=cause)
                   for t in range(2)]
        # As the analyzer lists them: a consequence right after its cause.
        return trace, [cause, *effects]
    raise KeyError(name)


def synthetic(events: int, *, pp: int = 4, tp: int = 2, mismatch_every: int = 997
              ) -> tuple[Trace, list[Finding]]:
    """A large trace of about ``events`` events (half attaches, half extracts) with a mismatch
    every ``mismatch_every`` microbatches; records are shared to keep memory small."""
    per_channel = max(1, events // (2 * tp))
    payload = (tensor("scores"), tensor("routing", (8,), "int64"))
    bad = (tensor("scores", dtype="float16"), payload[1])
    procs: list[ProcessTrace | None] = [None] * (pp * tp)
    findings: list[Finding] = []
    for t in range(tp):
        ra, re_ = rank((pp - 1) * tp + t, pp - 1, t, pp, tp), rank(t, 0, t, pp, tp)
        # Fresh tuples per event (shared TensorMeta records), as a loader produces them.
        att = tuple(attach(ra, s, tuple(list(payload))) for s in range(per_channel))
        ext = tuple(extract(re_, s, tuple(list(bad) if s % mismatch_every == mismatch_every - 1
                                          else list(payload))) for s in range(per_channel))
        procs[(pp - 1) * tp + t] = ProcessTrace(rank=ra, events=att)
        procs[t] = ProcessTrace(rank=re_, events=ext)
        findings += [
            finding(FindingKind.DTYPE_MISMATCH, f"rank {ra.rank} attached `scores` float32[8, 5]; "
                    f"rank {re_.rank} extracted float16[8, 5]",
                    ids((pp - 1) * tp + t, s, t, s), (ra.rank or 0, re_.rank or 0), s,
                    T0 + s * STEP, f"pp0<-pp{pp - 1}/tp{t}")
            for s in range(mismatch_every - 1, per_channel, mismatch_every)
        ]
    for p in range(1, pp - 1):
        for t in range(tp):
            procs[p * tp + t] = ProcessTrace(rank=rank(p * tp + t, p, t, pp, tp), events=())
    return Trace(processes=tuple(p for p in procs if p is not None)), findings


def viewer(name: str = "dtype-mismatch", **kwargs: object):  # type: ignore[no-untyped-def]
    """A viewer app on a named scenario."""
    from pptrace_tui.app import PptraceViewer

    trace, findings = scenario(name)
    return PptraceViewer.of(trace, findings, **kwargs)


async def wait_main(pilot) -> object:  # type: ignore[no-untyped-def]
    """Wait (bounded) until the loading screen has given way to the main screen."""
    from pptrace_tui.screens.main import MainScreen

    for _ in range(200):
        main = next((s for s in pilot.app.screen_stack if isinstance(s, MainScreen)), None)
        # After its first paint (painted_at): by then a main screen whose first divergence is
        # in the message layer has asked for the message screen, which opens on top.
        if main is not None and main.painted_at is not None:
            await pilot.pause()
            await pilot.pause()
            await wait_messages_built(pilot)
            return main
        await pilot.pause(0.02)
    raise AssertionError(f"the main screen never came up (screen: {pilot.app.screen!r})")


async def wait_messages_built(pilot) -> None:  # type: ignore[no-untyped-def]
    """Wait (bounded) until no screen waits for the message index (it is built off the UI
    thread; the message screen then takes the waiting screen's place)."""
    from pptrace_tui.screens.messages import MessagesWaiting

    for _ in range(1500):
        if not any(isinstance(s, MessagesWaiting) for s in pilot.app.screen_stack):
            await pilot.pause()
            return
        await pilot.pause(0.02)
    raise AssertionError("the message index was not built within 30 s")


async def settle(pilot, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Let a key's effects finish: a paint, then every worker the app runs (the command palette
    gathers its commands in one, which fails if its screen goes away mid-search: leaving a test
    or pressing the next key before it ends races Textual itself). Bounded: a worker still
    running after ``timeout`` seconds fails the test by name."""
    import asyncio

    await pilot.pause()
    running = [w for w in pilot.app.workers if not w.is_finished]
    try:
        await asyncio.wait_for(pilot.app.workers.wait_for_complete(running), timeout)
    except TimeoutError:
        names = [w.name for w in running if not w.is_finished]
        raise AssertionError(f"workers still running after {timeout:g} s: {names}") from None
    await pilot.pause()


def screen_text(app) -> str:  # type: ignore[no-untyped-def]
    """Everything on screen (the top screen and what shows through it), one line per row."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text for strip in strips)


def notes(app) -> str:  # type: ignore[no-untyped-def]
    """Every notification the app has shown (still on screen or not), one per line."""
    return "\n".join(str(n.message) for n in app._notifications)


def sync(fn):  # type: ignore[no-untyped-def]
    """Run an async Pilot test with asyncio.run (no async pytest plugin needed)."""
    import asyncio
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


async def _shoot(name: str, path: str, steps, size=(140, 36), **kwargs) -> None:  # type: ignore[no-untyped-def]
    app = viewer(name, **kwargs)
    async with app.run_test(size=size) as pilot:
        screen = await wait_main(pilot)
        while not screen.index.timeline_ready:  # type: ignore[attr-defined]
            await pilot.pause(0.02)
        await steps(pilot, screen)
        await pilot.pause(0.1)
        app.save_screenshot(filename=path)


def save_screenshots(directory: str) -> None:
    """Write the docs' screenshots (Textual's own SVG export) into ``directory``.

        python -c "import sys; sys.path.insert(0, 'tests'); import helpers_tui as h; \\
                   h.save_screenshots('docs/screenshots')"
    """
    import asyncio
    import os

    async def nothing(pilot, screen) -> None:  # type: ignore[no-untyped-def]
        return None

    async def error(pilot, screen) -> None:  # type: ignore[no-untyped-def]
        screen.grid.goto(0, 3)

    async def filtered(pilot, screen) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("f")
        await pilot.click("#ranks")
        await pilot.press("1")
        await pilot.click("#errors")
        await pilot.click("#apply")

    async def help_(pilot, screen) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("question_mark")

    shots = [
        ("view-overview.svg", "dtype-mismatch", nothing, {}),
        ("view-80x24.svg", "dtype-mismatch", nothing, {"size": (80, 24)}),
        ("view-tp-disagree.svg", "tp-disagree", nothing, {"size": (120, 40)}),
        ("view-engine-error.svg", "engine-error", error, {}),
        ("view-filter.svg", "dtype-mismatch", filtered, {}),
        ("view-help.svg", "dtype-mismatch", help_, {}),
        ("view-light.svg", "dtype-mismatch", nothing, {"theme": "light"}),
    ]
    for filename, name, steps, kwargs in shots:
        asyncio.run(_shoot(name, os.path.join(directory, filename), steps, **kwargs))
