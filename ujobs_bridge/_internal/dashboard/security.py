"""The rules every dashboard request passes: its host, its origin, credentials, CSRF tokens bound
to a session cookie, read-only.

Why it exists: the dashboard can requeue, cancel and discard jobs, so it must never be an open
door, not even to a web page the operator happens to open:

- a request whose ``Host`` is not an allowed host is refused (400), so a DNS-rebinding page
  (``evil.example`` resolving to 127.0.0.1) reads nothing;
- a state-changing request (POST, ...) must carry an ``Origin`` (or, without one, a
  ``Referer``) naming this very host, so a form on another site cannot act;
- every action carries a CSRF token keyed by the server's secret, the browser's session cookie
  (random, ``HttpOnly``, ``SameSite=Strict``, ``Secure`` under TLS) and the credentials, so a
  token read in one session is refused in any other;
- a non-local bind requires credentials (the command refuses to start otherwise, and refuses
  blank ones), and ``--read-only`` refuses every action whatever the request carries.

What it is not: user management. One set of credentials (or one token) guards the whole UI.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request

from ujobs_bridge._internal.dashboard.config import DashboardConfig, host_name

CSRF_FIELD = "csrf_token"
SESSION_COOKIE = "ujobs_session"
SESSION_SCOPE_KEY = "ujobs.session"  # the request's session id, once the guard has settled it
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)


def host_allowed(config: DashboardConfig, request: Request) -> bool:
    """True if the request's ``Host`` names one of the dashboard's allowed hosts."""
    host = host_name(request.headers.get("host", ""))
    return bool(host) and ("*" in config.allowed_hosts or host in config.allowed_hosts)


def same_origin(request: Request) -> bool:
    """True if a state-changing request comes from a page of this host: its ``Origin``, or
    without one its ``Referer``, names the host the request was sent to. A request carrying
    neither (or ``Origin: null``) is refused: every browser sends one on a form POST."""
    host = request.headers.get("host", "").strip().lower()
    source = request.headers.get("origin") or request.headers.get("referer")
    if not host or not source:
        return False
    try:
        parts = urlsplit(source.strip())
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host


def authorized(config: DashboardConfig, request: Request) -> bool:
    """True if the request may see the dashboard (always, when no credentials are set)."""
    if not config.guarded:
        return True
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and config.token is not None:
        return hmac.compare_digest(value.strip().encode(), config.token.encode())
    if scheme.lower() != "basic":
        return False
    try:
        user, _, password = base64.b64decode(value.strip()).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    if config.token is not None and hmac.compare_digest(password.encode(), config.token.encode()):
        return True
    if config.credentials is None:
        return False
    want_user, want_password = config.credentials
    return hmac.compare_digest(user.encode(), want_user.encode()) & hmac.compare_digest(
        password.encode(), want_password.encode()
    )


def session_of(request: Request) -> str | None:
    """The session id the browser sent in its cookie, if it has the shape this server gives."""
    value = request.cookies.get(SESSION_COOKIE, "")
    return value if _SESSION_ID.fullmatch(value) else None


def new_session() -> str:
    return secrets.token_urlsafe(32)


def csrf_token(config: DashboardConfig, request: Request) -> str:
    """The token this server puts in its forms: keyed by the server's secret, the request's
    session and the credentials it carried, so it is useless in any other session."""
    session = request.scope.get(SESSION_SCOPE_KEY) or session_of(request) or ""
    identity = request.headers.get("authorization", "")
    message = b"csrf:" + session.encode() + b"\0" + identity.encode()
    return hmac.new(config.secret, message, hashlib.sha256).hexdigest()


def csrf_valid(config: DashboardConfig, request: Request, submitted: object) -> bool:
    """True if ``submitted`` is the token of the session the request's cookie names."""
    if not isinstance(submitted, str) or not submitted or session_of(request) is None:
        return False
    return hmac.compare_digest(submitted.encode(), csrf_token(config, request).encode())
