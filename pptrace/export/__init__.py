"""Where recorded events go: the OTLP/JSON trace file, SDK spans, OTLP export.

- ``file_sink``: ``FileSink``, the one trace-file encoder (events, or the recorder's raw tuples
  through per-shape templates, straight to OTLP/JSON lines; held byte for byte to the official
  protobuf encoding by the tests);
- ``trace_file``: the file's name, its safe, append-only writer and its compression;
- ``segments``: ``TraceSegments``, a process's trace as one file or as numbered segments within
  a disk budget, the oldest deleted and counted;
- ``spans``: ``SdkSpanSink`` (events as SDK spans through any tracer provider), the process's
  resource, pptrace's own provider;
- ``otlp``: the fail-open OTLP processor and the official exporters, bounded in what they read;
- ``sinks``: ``build_sink``, the sink a config names (file, OTLP or both).

Rule: imports ``pptrace.model`` and ``pptrace.record``'s raw-event reader only, and
OpenTelemetry; never torch, Textual or the read side.
"""
