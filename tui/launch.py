"""The viewer's entry point for ``pptrace view`` (registered as the ``pptrace.viewers`` entry
point ``textual``), so that pptrace finds the viewer without importing ``tui`` itself.

    open_viewer(loader, follow=False, theme="dark")  # -> None, or the load error's text
    open_viewer(loader, partial="the first 4% of 1.5 GB")  # the first call gives a trace's
                                                          # start; the second, all of it
"""

from __future__ import annotations

from .app import Loader, PptraceViewer

__all__ = ["open_viewer"]


def open_viewer(loader: Loader, *, follow: bool = False, theme: str = "dark",
                partial: str | None = None) -> str | None:
    """Run the viewer until the user quits; return the error text if loading failed."""
    app = PptraceViewer(loader, follow=follow, theme=theme, partial=partial)
    app.run()
    return app.load_error
