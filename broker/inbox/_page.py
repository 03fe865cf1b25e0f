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
#: Path -> (file, content type) of the page's static assets.
ASSETS = {
    "/inbox.js": ("inbox.js", "text/javascript; charset=utf-8"),
    "/inbox.css": ("inbox.css", "text/css; charset=utf-8"),
}


@functools.cache
def asset(name: str) -> bytes:
    """The bytes of the static file *name* (read once)."""
    return (importlib.resources.files(__package__) / "static" / name).read_bytes()


def page_html(csrf: str) -> bytes:
    """The page, with *csrf* (hex digits) in its slot."""
    if not re.fullmatch(r"[0-9a-f]{64}", csrf):
        raise ValueError("csrf must be 64 lower-case hex digits: derive it with InboxKeys")
    return asset("index.html").replace(_CSRF_SLOT.encode(), csrf.encode())
