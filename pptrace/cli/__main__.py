"""``python -m pptrace.cli``: the same as the ``pptrace`` command."""

from pptrace.cli.main import main

raise SystemExit(main())
