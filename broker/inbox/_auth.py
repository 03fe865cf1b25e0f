"""Who may use the inbox: one secret token, a cookie after the first visit, a CSRF token.

Synopsis::

    keys = InboxKeys.new()                     # or InboxKeys(token=read from --token-file)
    keys.authorized(request)                   # the cookie, ?token= or "Authorization: Bearer"
    keys.csrf_ok(request)                      # the X-CSRF-Token header of an answering POST

The model, said once: the server listens on 127.0.0.1 unless told otherwise, and every request
must carry the token — in the URL of the first visit (``/?token=…``, which answers with a
cookie and a redirect to ``/`` so the token leaves the address bar), in that cookie afterwards
(``HttpOnly``: no script reads it; ``SameSite=Strict``: no other site's page sends it), or as
``Authorization: Bearer …`` from a script. Without it: 401 and nothing else. Every answering
POST must also carry the CSRF token the page was served with, in the ``X-CSRF-Token`` header;
missing or wrong: 403, and nothing is recorded.

The cookie and the CSRF token are HMACs of the token, so nothing but the token needs keeping,
and two inboxes with different tokens on one host (cookies ignore the port) use different
cookie names. Every comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import urllib.parse
from http.cookies import CookieError, SimpleCookie
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from ._http import Request

__all__ = ["CSRF_HEADER", "MIN_TOKEN", "InboxKeys", "check_token"]

CSRF_HEADER = "x-csrf-token"
#: The shortest token accepted (a generated one is 43 characters).
MIN_TOKEN = 16


def check_token(token: object, *, parameter: str = "token") -> str:
    """*token* if it is a usable secret, else ValueError naming *parameter* and the fix."""
    if not isinstance(token, str) or len(token) < MIN_TOKEN:
        raise ValueError(
            f"{parameter} must be a secret of at least {MIN_TOKEN} characters: generate one, "
            "e.g. python -c 'import secrets; print(secrets.token_urlsafe())'"
        )
    if not all(33 <= ord(char) < 127 for char in token):
        raise ValueError(
            f"{parameter} must be printable ASCII without spaces (it goes in a URL and a "
            "cookie): generate one with secrets.token_urlsafe()"
        )
    return token


def _mac(token: str, purpose: str) -> str:
    return hmac.new(token.encode(), purpose.encode(), hashlib.sha256).hexdigest()


@attrs.frozen(kw_only=True)
class InboxKeys:
    """The token and what is derived from it (module doc)."""

    token: str = attrs.field(validator=lambda _i, _a, value: check_token(value))
    cookie_name: str = attrs.field(init=False)
    cookie_value: str = attrs.field(init=False)
    csrf: str = attrs.field(init=False)

    @cookie_name.default
    def _cookie_name(self) -> str:
        return "broker_inbox_" + _mac(self.token, "cookie-name")[:12]

    @cookie_value.default
    def _cookie_value(self) -> str:
        return _mac(self.token, "cookie")

    @csrf.default
    def _csrf(self) -> str:
        return _mac(self.token, "csrf")

    @classmethod
    def new(cls) -> InboxKeys:
        """Keys around a fresh random token."""
        return cls(token=secrets.token_urlsafe(32))

    def set_cookie(self) -> str:
        """The ``Set-Cookie`` value of a first visit."""
        return f"{self.cookie_name}={self.cookie_value}; Path=/; HttpOnly; SameSite=Strict"

    # -- people signed in with their own token (broker people add) ------------------------------

    @property
    def person_cookie_name(self) -> str:
        """The cookie of a person signed in (distinct from the shared token's)."""
        return "broker_person_" + _mac(self.token, "person-cookie-name")[:12]

    def person_cookie(self, name: str, token_hash: str) -> str:
        """The cookie value of *name* signed in with the token whose hash is *token_hash*: a
        new token (or the person removed) makes it worthless at once."""
        return f"{name}.{_mac(self.token, f'person:{name}:{token_hash}')}"

    def set_person_cookie(self, name: str, token_hash: str) -> str:
        """The ``Set-Cookie`` value of a person's first visit."""
        value = self.person_cookie(name, token_hash)
        return f"{self.person_cookie_name}={value}; Path=/; HttpOnly; SameSite=Strict"

    def signed_in_as(self, request: Request) -> tuple[str, str] | None:
        """The (name, MAC) a person's cookie claims, unchecked (see :meth:`person_cookie`)."""
        value = self._cookie(request, self.person_cookie_name)
        if value is None or "." not in value:
            return None
        name, _, mac = value.rpartition(".")
        return (name, mac) if name else None

    def given_token(self, request: Request) -> str | None:
        """A token the request carries itself (``?token=`` or a bearer header), if any."""
        bearer = request.header("authorization")
        if bearer is not None and bearer.startswith("Bearer "):
            return bearer.removeprefix("Bearer ").strip() or None
        values = urllib.parse.parse_qs(request.query).get("token", [])
        return values[0] if values else None

    def query_token_ok(self, request: Request) -> bool:
        """Whether the URL carries the token (``?token=…``)."""
        values = urllib.parse.parse_qs(request.query).get("token", [])
        return any(hmac.compare_digest(value.encode(), self.token.encode()) for value in values)

    def authorized(self, request: Request) -> bool:
        """Whether *request* carries the token: cookie, ``?token=`` or a bearer header."""
        cookie = self._cookie(request)
        if cookie is not None and hmac.compare_digest(cookie.encode(), self.cookie_value.encode()):
            return True
        bearer = request.header("authorization")
        if bearer is not None and bearer.startswith("Bearer "):
            given = bearer.removeprefix("Bearer ").strip()
            if hmac.compare_digest(given.encode(), self.token.encode()):
                return True
        return self.query_token_ok(request)

    def csrf_ok(self, request: Request) -> bool:
        """Whether *request* carries the right CSRF token in its ``X-CSRF-Token`` header."""
        given = request.header(CSRF_HEADER)
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())

    def _cookie(self, request: Request, name: str | None = None) -> str | None:
        header = request.header("cookie")
        if header is None:
            return None
        try:
            jar: SimpleCookie = SimpleCookie(header)
        except CookieError:
            return None
        morsel = jar.get(name or self.cookie_name)
        return None if morsel is None else morsel.value
