"""The loader reads regular files only and never blocks on one that is not (issue 15, item 5).

A FIFO named directly is a one-line error (exit 2); a FIFO, a device or a link to one inside a
trace directory or a glob is skipped and said in one line among the input problems; a file that
reports size 0 (``/proc`` files, ``/proc/kmsg`` among them, whose read blocks) is never read.
Each case runs the real command in a subprocess with a timeout, so a regression fails instead of
hanging the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "data" / "golden-pp2"
SKIPPED = "skipped: a FIFO (only regular files are read)"


def analyze(*paths: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pptrace", "analyze", *map(str, paths)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.jsonl"
    os.mkfifo(path)
    return path


@pytest.fixture
def held_fifo(fifo: Path) -> Iterator[Path]:
    """A FIFO that a writer holds open and never writes to: a blocking read never returns."""
    opened = threading.Event()
    fds: list[int] = []

    def writer() -> None:
        fds.append(os.open(fifo, os.O_RDWR))  # O_RDWR: opens at once, keeps a writer there
        opened.set()

    threading.Thread(target=writer, daemon=True).start()
    assert opened.wait(10)
    yield fifo
    os.close(fds[0])


def test_a_fifo_named_directly_is_a_one_line_error(held_fifo: Path) -> None:
    done = analyze(held_fifo)
    assert done.returncode == 2
    assert done.stderr == f"pptrace: error: {held_fifo}: a FIFO (only regular files are read)\n"


def test_a_link_to_a_fifo_in_a_trace_directory_is_skipped_and_said(
    tmp_path: Path, held_fifo: Path
) -> None:
    traces = tmp_path / "traces"
    shutil.copytree(GOLDEN, traces)
    (traces / "zz-planted.jsonl").symlink_to(held_fifo)
    done = analyze(traces)
    assert done.returncode == 1, done.stderr  # the golden trace's findings, read as usual
    assert done.stderr == ""
    assert f"{traces / 'zz-planted.jsonl'}: {SKIPPED}" in done.stdout


def test_a_glob_and_a_directory_of_special_files_only(tmp_path: Path, held_fifo: Path) -> None:
    only = tmp_path / "only"
    only.mkdir()
    (only / "rank0.jsonl").symlink_to(held_fifo)
    (only / "zero.jsonl").symlink_to("/dev/zero")  # endless data
    (only / "gone.jsonl").symlink_to(tmp_path / "nothing-here")
    done = analyze(only)
    assert done.returncode == 2
    assert done.stderr == (
        f"pptrace: error: {only}: no trace files (*.json, *.jsonl, *.ndjson, *.jsonl.gz, "
        f"*.jsonl.zst) in directory; "
        f"{only / 'gone.jsonl'}: skipped: a symbolic link to nothing (only regular files are "
        "read)\n")
    done = analyze(f"{only}/r*.jsonl")
    assert done.returncode == 2
    assert done.stderr == (f"pptrace: error: {only}/r*.jsonl: no file matches this pattern; "
                           f"{only / 'rank0.jsonl'}: {SKIPPED}\n")
    done = analyze(only / "zero.jsonl")
    assert done.returncode == 2
    assert done.stderr.endswith("zero.jsonl: a character device (only regular files are read)\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a /proc file is Linux's")
def test_a_file_that_reports_size_0_is_never_read(tmp_path: Path) -> None:
    # /proc files report size 0 whatever they hold; /proc/kmsg blocks on read. This one holds
    # text and would be read to its end if the loader trusted reads rather than the size.
    link = tmp_path / "kmsg.jsonl"
    link.symlink_to("/proc/self/status")
    done = analyze(link)
    assert done.returncode == 2
    assert done.stderr == f"pptrace: error: {link}:1: empty file: no trace data\n"
