"""The ``pptrace`` command: one module per subcommand, and the only place argparse is used.

Rule: may import every other part; nothing imports it.
"""
