"""Optional content fingerprints of auxiliary tensors (off by default: they read tensor memory).

A CPU tensor is hashed on the spot (BLAKE2b of its bytes). A CUDA tensor is reduced on its own
stream by ``torch.hash_tensor`` (an XOR of its 64-bit words: it tells changed values apart, not
permutations) and the 8-byte result is read later by the recorder thread after the stream's event,
so the engine's thread never waits for the device.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

__all__ = ["resolve", "start"]

_U64 = (1 << 64) - 1


def start(tensor: torch.Tensor) -> Any:
    """Begin a fingerprint of ``tensor`` as it is now; return a pending value for ``resolve``."""
    if type(tensor) is not torch.Tensor:
        # A tensor subclass's __torch_function__ is user code the engine never calls.
        with torch._C.DisableTorchFunctionSubclass():
            return _start(tensor)
    return _start(tensor)


def _start(tensor: torch.Tensor) -> Any:
    if tensor.device.type == "cpu":
        data = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        # memoryview over a CPU tensor we own: a plain host read, no device involved.
        host = memoryview(data.numpy())  # type: ignore[arg-type]  # ndarray is a buffer
        return "b2:" + hashlib.blake2b(host, digest_size=8).hexdigest()
    if tensor.device.type == "meta":
        return None  # no contents to hash
    flat = tensor.detach().reshape(-1)
    if flat.numel() == 0:
        return "x64:" + "0" * 16  # the XOR of no words (hash_tensor refuses an empty input)
    digest = torch.hash_tensor(flat)
    done = torch.cuda.Event() if tensor.device.type == "cuda" else None  # type: ignore[no-untyped-call]
    if done is not None:
        done.record()
    return (digest, done)


def resolve(pending: Any) -> str | None:
    """Turn a pending fingerprint into its text (called off the engine's thread)."""
    if pending is None or isinstance(pending, str):
        return pending
    digest, done = pending
    if done is not None:
        done.synchronize()  # waits on this thread only, for work already queued
    # hash_tensor's digest is a uint64, which int() reads through int64: half of all digests
    # (the top bit set) overflowed, and their events were lost. Read the same 8 bytes as int64.
    return f"x64:{int(digest.to('cpu').view(torch.int64)) & _U64:016x}"
