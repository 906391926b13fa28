"""What ``pptrace run`` reads from a multi-node launcher's command line (issue 22).

Every node of a multi-node job runs its own ``pptrace run``. A run id drawn on each node would
differ; the id the launcher shares across the nodes (torchrun's ``--rdzv-id``, or the
``TORCHELASTIC_RUN_ID`` an agent already set) is the job's, so the nodes' traces carry one:

    shared_run_id(["torchrun", "--nnodes", "2", "--rdzv-id", "job7", "x.py"], {})  # "tr-job7"
    nodes(["torchrun", "--nnodes=2", "x.py"])  # 2: say how to bring the traces together
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

__all__ = ["combine_note", "nodes", "shared_run_id"]

_LAUNCHERS = frozenset({"torchrun", "torch.distributed.run", "torch.distributed.launch"})
# torchrun's options that take no value: the word after them is the script, not their value.
_FLAGS = frozenset({"--standalone", "--no-python", "--run-path", "--module", "--use-env"})


def _launcher_args(command: Sequence[str]) -> list[str] | None:
    """The arguments after torchrun (also ``python -m torch.distributed.run``), else None."""
    for i, word in enumerate(command):
        if os.path.basename(word) in _LAUNCHERS:
            return list(command[i + 1:])
        if word == "-m" and i + 1 < len(command) and command[i + 1] in _LAUNCHERS:
            return list(command[i + 2:])
    return None


def _option(args: Sequence[str], *names: str) -> str | None:
    """The value of the first of ``names`` (``--x v`` or ``--x=v``; ``-`` and ``_`` alike)."""
    wanted = {n.replace("_", "-") for n in names}
    i = 0
    while i < len(args) and args[i].startswith("-"):  # the first other word is the script
        name, eq, value = args[i].partition("=")
        name = name.replace("_", "-")
        takes_value = not eq and name not in _FLAGS and name.startswith("--")
        if name in wanted:
            return value if eq else (args[i + 1] if i + 1 < len(args) else None)
        i += 2 if takes_value else 1
    return None


def nodes(command: Sequence[str]) -> int:
    """The most nodes a torchrun command asks for (``--nnodes 2`` or ``1:4``); 1 otherwise."""
    args = _launcher_args(command)
    value = None if args is None else _option(args, "--nnodes")
    try:
        return int((value or "1").rpartition(":")[2])
    except ValueError:
        return 1


def shared_run_id(command: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """The run id every node of the job shares, when the launcher names one; else None."""
    if environ.get("TORCHELASTIC_RUN_ID"):
        return "tr-" + environ["TORCHELASTIC_RUN_ID"]
    args = _launcher_args(command)
    rdzv = None if args is None else _option(args, "--rdzv-id")
    return None if rdzv in (None, "", "none") else f"tr-{rdzv}"


def combine_note(command: Sequence[str], trace_dir: str, run_id: str) -> str | None:
    """What to tell the user on a node of a multi-node job, or None on one node."""
    count = nodes(command)
    if count <= 1:
        return None
    return (f"pptrace: a {count}-node job: this node's traces go to {trace_dir} with run id "
            f"{run_id}; run pptrace run on every node, then analyze the nodes' folders together "
            "(copy them to one machine, or use a shared file system, or export OTLP to one "
            "collector): pptrace analyze NODE1_DIR NODE2_DIR ... (docs/multi-node.md)")
