"""The folder ``pptrace run`` puts first on ``PYTHONPATH``; it holds pptrace's sitecustomize."""
