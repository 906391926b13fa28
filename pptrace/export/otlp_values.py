"""OTLP/JSON attribute values, as the official encoding writes them (``FileSink``'s).

    attributes({"pptrace.seq": 3})  # ',"attributes":[{"key":"pptrace.seq","value":{...}}]'
    any_value(v)                    # one value as an ``AnyValue`` (ValueError: no form)

lowerCamelCase names, 64-bit integers as strings, compact separators, ASCII escapes; exact types
only (a subclass of str or int never reaches here: the schema and the converter hand plain
values).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring_ascii as esc  # what json.dumps uses (ensure_ascii)
from typing import Any

__all__ = ["SCALARS", "VALUES", "any_value", "array", "attributes", "esc", "no_form"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _int(value: int) -> str:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"integer attribute {value} does not fit OTLP's int64")
    return f'{{"intValue":"{value}"}}'


def _float(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"float attribute {value} is not finite")
    return f'{{"doubleValue":{value!r}}}'


def array(items: Sequence[Any]) -> str:
    """A sequence as an ``ArrayValue`` of scalars."""
    if not items:
        return '{"arrayValue":{}}'
    return '{"arrayValue":{"values":[' + ",".join([any_value(v, SCALARS) for v in items]) + "]}}"


# One lookup per value instead of a chain of type tests; exact types only (a subclass of str or
# int never reaches here: the schema and the converter hand plain values).
SCALARS: dict[type, Callable[[Any], str]] = {
    str: lambda v: '{"stringValue":' + esc(v) + "}",
    bool: lambda v: '{"boolValue":true}' if v else '{"boolValue":false}',
    int: _int,
    float: _float,
}
VALUES: dict[type, Callable[[Any], str]] = {**SCALARS, tuple: array, list: array}


def no_form(value: Any) -> str:
    """What a value without an OTLP form here gets: a one-line error naming its type."""
    raise ValueError(f"attribute value of type {type(value).__name__} has no OTLP form here")


def any_value(value: Any, encoders: Mapping[type, Callable[[Any], str]] = VALUES) -> str:
    """One attribute value as an OTLP/JSON ``AnyValue``."""
    return encoders.get(type(value), no_form)(value)


def attributes(attrs: Mapping[str, Any]) -> str:
    """``"attributes":[...]`` with a leading comma, or "" when there are none."""
    if not attrs:
        return ""
    return ',"attributes":[' + ",".join(
        ['{"key":' + esc(k) + ',"value":' + any_value(v) + "}" for k, v in attrs.items()]) + "]"
