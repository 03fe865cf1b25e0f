"""The page itself: HTML, script and style shipped as package data (``broker/inbox/static``).

The HTML has one slot, the CSRF token (64 hex digits, so nothing there can be markup). The
script renders every model- or tool-produced field with ``textContent``, never as markup.
"""

from __future__ import annotations

import functools
import importlib.resources
import re

__all__ = ["ASSETS", "page_html"]

_CSRF_SLOT = "{{csrf}}"
_PERSON_SLOT = "{{person}}"
#: Path -> (file, content type) of the page's static assets.
ASSETS = {
    "/inbox.js": ("inbox.js", "text/javascript; charset=utf-8"),
    "/inbox.css": ("inbox.css", "text/css; charset=utf-8"),
}


@functools.cache
def asset(name: str) -> bytes:
    """The bytes of the static file *name* (read once)."""
    return (importlib.resources.files(__package__) / "static" / name).read_bytes()


def page_html(csrf: str, person: str | None = None) -> bytes:
    """The page, with *csrf* (hex digits) and the signed-in *person*'s name (a checked name:
    letters, digits, ``.``, ``_``, ``-``; None: the shared token, no one) in their slots."""
    if not re.fullmatch(r"[0-9a-f]{64}", csrf):
        raise ValueError("csrf must be 64 lower-case hex digits: derive it with InboxKeys")
    if person is not None and not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", person):
        raise ValueError(f"person must be a person's name (broker people add), got {person!r}")
    page = asset("index.html").replace(_CSRF_SLOT.encode(), csrf.encode())
    return page.replace(_PERSON_SLOT.encode(), (person or "").encode())
