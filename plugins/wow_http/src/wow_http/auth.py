"""Who may call the API: the bearer-token check and the settings that turn it on.

An app guards its routes with any FastAPI dependency through an auth hook
(:data:`~wow_http.routes.AuthHook`: ``hook(route) -> dependency | None``);
:func:`bearer_token` is the built-in one, and ``WOW_HTTP__AUTH__BEARER_TOKENS`` turns it
on for every route without code. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from typing import Annotated, Any

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from wow_http.routes import AuthHook, every_route
from wow_http.settings import HttpSettings

_scheme = HTTPBearer(auto_error=False, description="A token of WOW_HTTP__AUTH__BEARER_TOKENS (or the app's).")


def bearer_token(tokens: Iterable[str] | Callable[[str], str | None]) -> Callable[..., Any]:
    """A dependency accepting ``Authorization: Bearer <token>``.

    ``tokens`` is the accepted tokens (the principal is then ``"bearer"``), or a function
    mapping a token to its principal (``None``: refused). A missing or refused token is
    answered 401 with ``WWW-Authenticate: Bearer``.
    """
    if callable(tokens):
        lookup = tokens
    else:
        accepted = [token.encode() for token in tokens]
        if not accepted:
            raise ValueError("bearer_token needs at least one token")

        def lookup(token: str) -> str | None:
            given = token.encode()
            found = False
            for candidate in accepted:
                found |= hmac.compare_digest(given, candidate)
            return "bearer" if found else None

    async def authenticate(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_scheme)],
    ) -> str:
        if credentials is None:
            raise HTTPException(401, "a bearer token is required", headers={"WWW-Authenticate": "Bearer"})
        principal = lookup(credentials.credentials)
        if principal is None:
            raise HTTPException(
                401, "the bearer token is not accepted", headers={"WWW-Authenticate": "Bearer"}
            )
        return principal

    return authenticate


def auth_from_settings(settings: HttpSettings) -> AuthHook | None:
    """The hook of ``WOW_HTTP__AUTH__BEARER_TOKENS``: every route, or ``None`` when unset."""
    tokens = [token.get_secret_value() for token in settings.auth.bearer_tokens]
    return every_route(bearer_token(tokens)) if tokens else None
