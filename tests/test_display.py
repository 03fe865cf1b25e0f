"""``printable``: what a person sees is what the text says."""

from __future__ import annotations

import pytest

from broker._display import printable


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("ls -la", "ls -la"),
        ("rm -rf ~\r\x1b[2Kls", "rm -rf ~\\x0d\\x1b[2Kls"),
        ("a\tb\x00c\x7fd", "a\\x09b\\x00c\\x7fd"),
        ("csi\x9b2K", "csi\\x9b2K"),
        ("abc\u202edef", "abc\\u202edef"),
        ("\u2066x\u2069\u200e\u200f\u061c", "\\u2066x\\u2069\\u200e\\u200f\\u061c"),
        ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
        ("line\u2028sep", "line\\u2028sep"),
        ("two\nlines", "two\\x0alines"),
        ("café ünïcode 日本", "café ünïcode 日本"),
        ("a \\x1b literal", "a \\x1b literal"),
    ],
)
def test_controls_and_bidi_are_escaped_visibly(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_newlines_can_be_kept_for_multi_line_reasons() -> None:
    assert printable("one\ntwo\r", keep_newlines=True) == "one\ntwo\\x0d"


def test_every_escaped_result_is_free_of_controls() -> None:
    everything = "".join(map(chr, range(0x0, 0x3000)))
    shown = printable(everything)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in shown)
    for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]:
        assert chr(code) not in shown
