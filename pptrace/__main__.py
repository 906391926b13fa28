"""``python -m pptrace``: the same as the ``pptrace`` command."""

from pptrace.cli.main import main

raise SystemExit(main())
