"""The rules every dashboard request passes: credentials, CSRF tokens on actions, read-only.

Why it exists: the dashboard can requeue, cancel and discard jobs, so it must never be an open
door: a non-local bind requires credentials (the command refuses to start otherwise), every
action is a POST carrying a token only a page this server rendered can know (a forged form on
another site cannot), and ``--read-only`` refuses every action whatever the request carries.

What it is not: user management. One set of credentials (or one token) guards the whole UI.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from starlette.requests import Request

from ujobs_bridge._internal.dashboard.config import DashboardConfig

CSRF_FIELD = "csrf_token"


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


def csrf_token(config: DashboardConfig, request: Request) -> str:
    """The token this server puts in its forms: bound to the server's secret and to the
    credentials the request carried, so it is useless to anyone who cannot read our pages."""
    identity = request.headers.get("authorization", "")
    return hmac.new(config.secret, b"csrf:" + identity.encode(), hashlib.sha256).hexdigest()


def csrf_valid(config: DashboardConfig, request: Request, submitted: str | None) -> bool:
    if not submitted:
        return False
    return hmac.compare_digest(submitted.encode(), csrf_token(config, request).encode())
