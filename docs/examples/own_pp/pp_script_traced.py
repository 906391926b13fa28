"""The same pipeline, traced from code: each rank process instruments itself.

    torchrun --standalone --nproc-per-node 2 pp_script_traced.py
    pptrace analyze pptrace-traces
"""

from pp_script import main

import pptrace

if __name__ == "__main__":
    # The transport module and its two functions, attach first. pp_script has already bound
    # them by name: instrument() patches those bindings too, and puts them back on uninstrument().
    pptrace.instrument(targets="my_transport:attach_aux,pop_aux")
    main()  # each rank's trace file is flushed when its process exits
