"""What follows from the rest of an event: the rules by which schema version 2 leaves values out.

Both directions of the schema (``pptrace.model.schema``) use these, so that what a writer leaves
out is exactly what a reader rebuilds: a value is left out only when the rule gives it back.
It imports the standard library only.

    implied_nbytes((8, 5), "float32", True)      # 160
    tensors_at(("a", "p.x", "p.y", "b"), ("p.x", "p.y"))   # 1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pptrace.model.records import PREFIX, Direction, Event

__all__ = ["ITEMSIZES", "implied_devices", "implied_keys_after", "implied_nbytes", "tensors_at"]

#: Bytes per element of the dtypes whose byte counts version 2 may leave out (elements times
#: this). Entries are only ever added: a file written with one is read with the same number.
ITEMSIZES: Mapping[str, int] = {
    "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4, "complex32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "complex64": 8, "complex128": 16,
}


def implied_nbytes(shape: Sequence[int], dtype: str, is_tensor: bool) -> int | None:
    """A value's bytes as its shape and dtype give them (0 for a non-tensor; None for a dtype
    not in ``ITEMSIZES``)."""
    if not is_tensor:
        return 0
    size = ITEMSIZES.get(dtype)
    if size is None:
        return None
    for d in shape:
        size *= d
    return size


def implied_devices(main_device: object, is_tensor: Sequence[bool]) -> list[str] | None:
    """The values' devices when every tensor is on ``main_device`` (a non-tensor's is empty);
    None when a value is a tensor and ``main_device`` is no string (nothing to imply)."""
    if not isinstance(main_device, str):
        return None if any(is_tensor) else [""] * len(is_tensor)
    return [main_device if t else "" for t in is_tensor]


def tensors_at(before: Sequence[str], keys: Sequence[str]) -> int | None:
    """Where ``keys`` (one or more) first stand in ``before``, together and in order, or None."""
    n = len(keys)
    if not n:
        return None
    first, whole = keys[0], tuple(keys)
    for i in range(len(before) - n + 1):
        if before[i] == first and tuple(before[i:i + n]) == whole:
            return i
    return None


def implied_keys_after(event: Event) -> tuple[str, ...]:
    """The keys after the call that follow from the keys before it and the call (version 2
    writes the keys after only when the event's differ from these)."""
    before = event.keys_before
    if event.direction is Direction.ATTACH:
        if event.error_type is None:
            return (*before, *(m.key for m in event.tensors))
        return (*before, *event.inserted_before_error)
    if event.error_type is None:
        return tuple(k for k in before if not k.startswith(PREFIX))
    return tuple(before)
