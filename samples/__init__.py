"""A real multi-process PP sampling pipeline on gloo (CPU), traced by pptrace, with faults.

    from .launch import run_pipeline
    from .options import PipelineOptions
    result = run_pipeline(PipelineOptions(ranks=4, steps=32, fault="duplicate", out_dir="t"))

Modules, one concept each: ``faults`` (the fault table, no torch), ``options`` (run options and
rank reports, no torch), ``launch`` (starting ranks, progress, bounded wait, no torch),
``model`` (the tiny decoder), ``observer`` (the sampling observer and its auxiliary output),
``transport`` (the engine's tensor-dict send/receive with TP slices), ``inject`` (what each fault
does), ``pipeline`` (one rank's schedule and its pptrace recorder), ``preload`` (fork-server
imports). ``pptrace demo`` is the command-line front end.
"""
