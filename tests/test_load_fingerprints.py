"""Fingerprints cut out of a span's text (``pptrace.load.fingerprints``): only a plain array."""

from __future__ import annotations

import pytest

from pptrace.load import fingerprints
from pptrace.model.records import TensorMeta

MARK = fingerprints.marker("pptrace.msg.tensor.fingerprints")


def _span(*values: bytes) -> bytes:
    items = b",".join(b'{"stringValue":"%b"}' % v for v in values)
    return b'{"key":"x","value":{"intValue":"1"}},' + MARK + items + b']}}},{"key":"y"}'


def test_two_spans_that_differ_in_fingerprints_only_cut_to_one_text() -> None:
    a, fa = fingerprints.cut(_span(b"b2:00ff", b""), MARK)
    b, fb = fingerprints.cut(_span(b"b2:0a0b", b""), MARK)
    assert a == b and (fa, fb) == (["b2:00ff", ""], ["b2:0a0b", ""])
    # Another count of values is another text (a template has one fingerprint per value).
    assert fingerprints.cut(_span(b"b2:00ff"), MARK)[0] != a


@pytest.mark.parametrize("text", [
    _span(b'b2:\\"00'),  # an escape: not cut (the decoder would read another string)
    _span(b"b2:00") + MARK + b'{"stringValue":"b2:01"}]}}}',  # two arrays: the decoder's last
    b'{"key":"x","value":{"intValue":"1"}}',  # none at all
    _span(b"b2:00").replace(b']}}}', b''),  # not closed
])
def test_anything_but_one_plain_array_is_left_in_the_text(text: bytes) -> None:
    assert fingerprints.cut(text, MARK) == (text, None)


def test_put_back_gives_each_value_its_fingerprint_and_none_for_an_empty_one() -> None:
    ts = (TensorMeta.of_key("x", (2,), "float32", "cpu", 8, sliced=True, fingerprint="old"),
          TensorMeta.of_key("t", (), "str", is_tensor=False))
    back = fingerprints.put_back(ts, ["b2:01", ""])
    assert back == (ts[0]._replace(fingerprint="b2:01"), ts[1])
    with pytest.raises(ValueError):
        fingerprints.put_back(ts, ["b2:01"])


JOINED = fingerprints.joined_marker("pptrace.msg.tensor.fingerprints")


def _joined(value: bytes) -> bytes:
    return b'{"key":"x","value":{"intValue":"1"}},' + JOINED + value + b'"}},{"key":"y"}'


def test_a_version_3_joined_string_cuts_as_the_array_does() -> None:
    a, fa = fingerprints.cut(_joined(b"b2:00ff "), MARK, JOINED)
    b, fb = fingerprints.cut(_joined(b"b2:0a0b "), MARK, JOINED)
    assert a == b and (fa, fb) == (["b2:00ff", ""], ["b2:0a0b", ""])
    assert fingerprints.cut(_joined(b"b2:00ff"), MARK, JOINED)[0] != a  # one value, not two
    assert fingerprints.cut(_joined(b"b2:00ff "), MARK) == (_joined(b"b2:00ff "), None)


@pytest.mark.parametrize("text", [
    _joined(b'b2:\\"00'),  # an escape
    _joined(b"b2:00") + JOINED + b'b2:01"}}',  # two values under the key: the decoder's last
    _span(b"b2:00") + JOINED + b'b2:01"}}',  # an array and a joined string
    _joined(b"b2:00").replace(b'"}}', b""),  # not closed
])
def test_anything_but_one_plain_joined_string_is_left_in_the_text(text: bytes) -> None:
    assert fingerprints.cut(text, MARK, JOINED) == (text, None)
