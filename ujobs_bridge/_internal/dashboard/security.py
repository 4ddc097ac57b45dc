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
- a session ends after ``session_idle_s`` without a request and ``session_max_age_s`` after it
  began, whatever its activity (the cookie carries both instants under the server's MAC, read
  on the injected clock); a session cookie minted under other credentials (or none) is not
  taken: a login gets a new session id, so a session id planted or read before the login is
  worth nothing after it (the CSRF tokens rendered under it with it);
- a non-local bind requires credentials (the command refuses to start otherwise, and refuses
  blank ones), and ``--read-only`` refuses every action whatever the request carries.

What it is not: user management. One set of credentials (or one token) guards the whole UI.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from starlette.requests import Request

from ujobs_bridge._internal.dashboard.config import DashboardConfig, host_name

CSRF_FIELD = "csrf_token"
SESSION_COOKIE = "ujobs_session"  # + "_<port>" when the Host names one (``session_cookie``)
SESSION_SCOPE_KEY = "ujobs.session"  # the request's Session, once the guard has settled it
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# id (secrets.token_urlsafe(32)) . began . last seen (epoch seconds) . MAC
_SESSION_COOKIE = re.compile(r"([A-Za-z0-9_-]{43})\.(\d{1,12})\.(\d{1,12})\.([0-9a-f]{64})")
# A live session's cookie is written again (its last-seen instant moved) at most this often:
# the idle expiry is exact to within this.
SEEN_STEP_S = 60


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


class Started(enum.StrEnum):
    """Why a request's session is new (a session carried over has none)."""

    NEW = "new"  # no session cookie, or not one this server made
    EXPIRED = "expired"  # idle or older than the maximum age
    LOGIN = "login"  # a cookie made under other credentials (or none): rotated on this login


@dataclass(frozen=True, slots=True)
class Session:
    """One browser's session: its id, when it began and when it was last seen (epoch seconds);
    ``started``: why it began with this request (None: carried over from the cookie)."""

    id: str
    began: int
    seen: int
    started: Started | None = None

    def cookie(self, config: DashboardConfig, request: Request) -> str:
        """The cookie value: the session under the server's MAC, bound to the credentials."""
        return f"{self.id}.{self.began}.{self.seen}.{_session_mac(config, request, self)}"

    def max_age(self, config: DashboardConfig) -> int:
        """The cookie's Max-Age: the sooner of the idle and the absolute ends."""
        left = self.began + config.session_max_age_s - self.seen
        return max(1, int(min(config.session_idle_s, left)))


def session_cookie(request: Request) -> str:
    """The session cookie's name for the dashboard the request reached: a browser keeps one
    cookie jar per host, not per port, so two dashboards on one host (a read-only one beside
    another) would replace each other's sessions under one name."""
    port = request.url.port
    return SESSION_COOKIE if port is None else f"{SESSION_COOKIE}_{port}"


def _session_mac(config: DashboardConfig, request: Request, session: Session) -> str:
    identity = request.headers.get("authorization", "")
    message = f"session:{session.id}.{session.began}.{session.seen}\0{identity}".encode()
    return hmac.new(config.secret, message, hashlib.sha256).hexdigest()


def _epoch(now: datetime) -> int:
    return int(now.timestamp())


def session_of(config: DashboardConfig, request: Request) -> Session:
    """The request's session: the cookie's when this server made it under the request's
    credentials and it is still live on the config's clock; else a new one saying why."""
    now = _epoch(config.clock.now())
    fresh = Session(secrets.token_urlsafe(32), now, now, Started.NEW)
    found = _SESSION_COOKIE.fullmatch(request.cookies.get(session_cookie(request), ""))
    if found is None:
        return fresh
    sid, began, seen, mac = found.group(1), int(found.group(2)), int(found.group(3)), found[4]
    carried = Session(sid, began, seen)
    if not hmac.compare_digest(mac, _session_mac(config, request, carried)):
        # Made under other credentials (or none: a login), by another process, or forged: its
        # id is not taken; a request carrying credentials gets a new one.
        return Session(fresh.id, now, now, Started.LOGIN if credentialed(request) else Started.NEW)
    if now - seen > config.session_idle_s or now - began > config.session_max_age_s:
        return Session(fresh.id, now, now, Started.EXPIRED)
    if now - seen >= SEEN_STEP_S:
        return Session(sid, began, now)
    return carried


def credentialed(request: Request) -> bool:
    return bool(request.headers.get("authorization", "").strip())


def session_cookie_due(request: Request, session: Session) -> bool:
    """Whether the response sets the session cookie: a new session, or a moved last-seen."""
    if session.started is not None:
        return True
    found = _SESSION_COOKIE.fullmatch(request.cookies.get(session_cookie(request), ""))
    return found is None or int(found.group(3)) != session.seen


def csrf_token(config: DashboardConfig, request: Request) -> str:
    """The token this server puts in its forms: keyed by the server's secret, the request's
    session and the credentials it carried, so it is useless in any other session."""
    session = request.scope.get(SESSION_SCOPE_KEY) or session_of(config, request)
    identity = request.headers.get("authorization", "")
    message = b"csrf:" + session.id.encode() + b"\0" + identity.encode()
    return hmac.new(config.secret, message, hashlib.sha256).hexdigest()


def csrf_valid(config: DashboardConfig, request: Request, submitted: object) -> bool:
    """True if ``submitted`` is the token of the live session the request's cookie carries (a
    session that began with this request, expired or rotated, has no token yet)."""
    session = request.scope.get(SESSION_SCOPE_KEY) or session_of(config, request)
    if not isinstance(submitted, str) or not submitted or session.started is not None:
        return False
    return hmac.compare_digest(submitted.encode(), csrf_token(config, request).encode())
