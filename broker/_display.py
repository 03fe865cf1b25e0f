"""Text shown to a person, made honest: control characters and bidi overrides escaped visibly.

A command or a reason comes from the model (or from a hook it may have influenced). Printed
raw, ``\\r\\x1b[2K`` erases what the person was about to approve and a right-to-left override
(U+202E) reorders it; either makes the prompt lie. :func:`printable` is the one place that
turns such characters into visible escapes; every prompt line goes through it.
"""

from __future__ import annotations

__all__ = ["printable"]

# Bidi embeddings/overrides (U+202A-U+202E), isolates (U+2066-U+2069), the LRM/RLM marks and
# the Arabic letter mark: each can reorder the text around it on screen.
_BIDI = frozenset(
    [
        *map(chr, range(0x202A, 0x202F)),
        *map(chr, range(0x2066, 0x206A)),
        "\u200e",
        "\u200f",
        "\u061c",
    ]
)
# Invisible characters that hide or join text: zero-width space/joiners, word joiner, BOM,
# and the line/paragraph separators (they break lines like a newline).
_INVISIBLE = frozenset(["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u2028", "\u2029"])


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """*text* with C0/C1 controls, DEL, bidi controls, invisible separators and lone
    surrogates escaped.

    ``\\x1b`` becomes the four characters ``\\x1b``, U+202E becomes ``\\u202e``, a lone
    surrogate (``json.loads`` makes one of ``"\\ud800"``; no terminal or codec can write it)
    becomes ``\\ud800``; a literal backslash is left alone (the escapes are for a person, not
    a parser). With ``keep_newlines`` a ``\\n`` stays a line break (for multi-line reasons);
    ``\\r`` and ``\\t`` are always escaped, since a carriage return can overwrite the line it
    is on.
    """
    out = []
    for char in text:
        code = ord(char)
        if char == "\n" and keep_newlines:
            out.append(char)
        elif (
            code < 0x20
            or 0x7F <= code <= 0x9F
            or 0xD800 <= code <= 0xDFFF
            or char in _BIDI
            or char in _INVISIBLE
        ):
            out.append(_escape(char))
        else:
            out.append(char)
    return "".join(out)
