"""OTLP shipped from the trace files, by a process of its own: the engine's process only writes.

The OpenTelemetry Collector's file receivers read files other programs write; this package does
the same for pptrace's trace files, so that OTLP export costs the engine's Python thread nothing
beyond its trace file. ``pptrace ship DIR`` (``pptrace.cli.ship``; started by ``pptrace run``,
or by the first traced process of a directory: ``pptrace.export.ship_launch``) holds the
directory's lock, tails every trace file there, and posts their spans to the collector the
standard ``OTEL_EXPORTER_OTLP_*`` variables name.

- ``tail``: a trace file read from a position, whole lines (or compressed members) only;
- ``reencode``: a trace-file line as the version 1 spans a collector gets;
- ``state``: the positions and counts, in a state file beside the traces;
- ``posters``, ``grpc_poster``: one request posted over the protocol asked for, and what
  became of it (delivered, never received: retried, or maybe received: counted lost);
- ``shipper``: the loop, its end, its drain.

It imports the loader's span decoders and the writer's encoder, never torch: it runs beside the
engine, not in it.
"""
