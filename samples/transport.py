"""Sending tensor dicts between pipeline stages over gloo, the way the engine does it.

A dict travels as a pickled metadata list first (per key: the key and, for a tensor, its device
*type*, dtype and size; any other value whole), then each non-empty tensor in dict order. With
tensor parallelism each tensor whose element count divides by the TP size is sent as this TP
rank's slice and re-assembled on the receiving stage by an all-gather over its TP group, so the
receiver holds slice j from the sender's TP rank j.

Every send is asynchronous (``isend``): a stage never waits for its peer to post the receive,
which keeps the lock-step schedule free of deadlocks. ``Link.drain()`` waits for what is pending.

    link = Link(tp_size=2, tp_rank=0, tp_group=group, tp_root=2)
    link.send_tensor_dict({"next_token_ids": ids, "__msg_type__": "output"}, dst=2)
    tensors = link.recv_tensor_dict(src=6)
    tensors = link.broadcast_tensor_dict(tensors if tp_rank == 0 else None)  # TP rank 0's dict

``broadcast_tensor_dict`` is the engine's way for the VPP path's last stage: only TP rank 0 runs
attach, and its dict (auxiliary tensors included) reaches the stage's other TP ranks whole.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

__all__ = ["MSG_TYPE", "Link", "TensorMetadata"]

MSG_TYPE = "__msg_type__"


class TensorMetadata(NamedTuple):
    """What the receiver needs to allocate a tensor: device type (no index), dtype, size."""

    device: str
    dtype: torch.dtype
    size: torch.Size


@dataclass
class Link:
    """One rank's end of the PP ring, with its TP group for slice re-assembly."""

    tp_size: int = 1
    tp_rank: int = 0
    tp_group: Any = None
    tp_root: int = 0  # the global rank of this stage's TP rank 0 (the broadcast's source)
    pending: list[tuple[Any, torch.Tensor]] = field(default_factory=list)

    def _isend(self, tensor: torch.Tensor, dst: int) -> None:
        self.pending.append((dist.isend(tensor, dst), tensor))

    def send_object(self, obj: Any, dst: int) -> None:
        """Send a picklable object: its size, then its bytes."""
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        self._isend(torch.tensor([data.numel()], dtype=torch.long), dst)
        self._isend(data, dst)

    def recv_object(self, src: int) -> Any:
        """Receive what ``send_object`` sent."""
        size = torch.empty(1, dtype=torch.long)
        dist.recv(size, src)
        data = torch.empty(int(size[0]), dtype=torch.uint8)
        dist.recv(data, src)
        return pickle.loads(data.numpy().tobytes())

    def send_tensor_dict(self, tensors: dict[str, Any], dst: int,
                         gather: int | None = None) -> None:
        """Send a dict: the metadata list, then each non-empty tensor in dict order; a
        tensor divisible by the all-gather group's size (``gather``, the TP size by default;
        1: no group) travels as this TP rank's slice."""
        size = self.tp_size if gather is None else gather
        metadata: list[tuple[str, Any]] = []
        to_send: list[torch.Tensor] = []
        for key, value in tensors.items():
            if isinstance(value, torch.Tensor):
                metadata.append((key, TensorMetadata(value.device.type, value.dtype, value.size())))
                to_send.append(value)
            else:
                metadata.append((key, value))
        self.send_object(metadata, dst)
        for tensor in to_send:
            if tensor.numel() == 0:
                continue
            if size > 1 and tensor.numel() % size == 0:
                tensor = tensor.reshape(size, -1)[self.tp_rank]
            # gloo rejects non-contiguous tensors.
            self._isend(tensor.contiguous(), dst)
        self._prune()

    def recv_tensor_dict(self, src: int, sent_whole: bool = False) -> dict[str, Any]:
        """Receive a dict sent by ``send_tensor_dict`` (re-assembling TP slices over the TP
        group). ``sent_whole``: the sender sent every tensor whole, yet each one the TP size
        divides is all-gathered over the TP group all the same (the ``wrong-gather-group``
        fault): it arrives TP times too large."""
        out: dict[str, Any] = {}
        for key, value in self.recv_object(src):
            if not isinstance(value, TensorMetadata):
                out[key] = value
                continue
            tensor = torch.empty(value.size, dtype=value.dtype, device=value.device)
            if tensor.numel() == 0:
                out[key] = tensor
                continue
            if sent_whole and self.tp_size > 1 and tensor.numel() % self.tp_size == 0:
                dist.recv(tensor, src)
                copies = [torch.empty_like(tensor) for _ in range(self.tp_size)]
                dist.all_gather(copies, tensor, group=self.tp_group)
                tensor = torch.cat(copies)  # TP whole copies, stacked along dim 0
            elif self.tp_size > 1 and tensor.numel() % self.tp_size == 0:
                part = torch.empty(tensor.numel() // self.tp_size, dtype=value.dtype)
                dist.recv(part, src)
                parts = [torch.empty_like(part) for _ in range(self.tp_size)]
                dist.all_gather(parts, part, group=self.tp_group)
                tensor = torch.cat(parts).reshape(value.size)
            else:
                dist.recv(tensor, src)
            out[key] = tensor
        return out

    def broadcast_tensor_dict(self, tensors: dict[str, Any] | None) -> dict[str, Any]:
        """TP rank 0's dict on every TP rank of the stage: metadata, then each tensor whole."""
        meta: list[Any] = [None]
        if self.tp_rank == 0:
            assert tensors is not None
            meta = [[(k, TensorMetadata(v.device.type, v.dtype, v.size()))
                     if isinstance(v, torch.Tensor) else (k, v) for k, v in tensors.items()]]
        dist.broadcast_object_list(meta, src=self.tp_root, group=self.tp_group)
        out: dict[str, Any] = {}
        for key, value in meta[0]:
            if not isinstance(value, TensorMetadata):
                out[key] = value
                continue
            tensor = (tensors[key].contiguous() if tensors is not None
                      else torch.empty(value.size, dtype=value.dtype, device=value.device))
            if tensor.numel():
                dist.broadcast(tensor, src=self.tp_root, group=self.tp_group)
            out[key] = tensor if tensors is None else tensors[key]
        return out

    def _prune(self) -> None:
        self.pending = [(w, t) for w, t in self.pending if not w.is_completed()]

    def drain(self) -> None:
        """Wait for every pending send."""
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()
