"""Who may call the API: the bearer-token check and the settings that turn it on.

An app guards its routes with any FastAPI dependency through an auth hook
(:data:`~wow_http.routes.AuthHook`: ``hook(route) -> dependency | None``);
:func:`bearer_token` is the built-in one, and ``WOW_HTTP__AUTH__BEARER_TOKENS`` turns it
on for every route without code. Tokens are compared in constant time.

:func:`use_auth` names an app's hook once; :func:`app_auth` is what guards a runtime's
routes when no hook is given (``create_app``, ``router`` and ``wow run`` alike): the app's
hook, else the bearer tokens of the settings, else nothing.
"""

from __future__ import annotations

import hmac
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from wow_http.routes import AuthHook, every_route
from wow_http.settings import SECTION, HttpSettings

if TYPE_CHECKING:
    from wow_core import WowApp, WowRuntime

_scheme = HTTPBearer(auto_error=False, description="A token of WOW_HTTP__AUTH__BEARER_TOKENS (or the app's).")


def bearer_token(tokens: Iterable[str] | Callable[[str], str | None]) -> Callable[..., Any]:
    """A dependency accepting ``Authorization: Bearer <token>``.

    ``tokens`` is the accepted tokens (the principal is then ``"bearer:<n>"``, the
    token's position in the list from 1: it tells the tokens apart in the operator of
    the commands, and says nothing of the token itself), or a function mapping a token
    to its principal (``None``: refused). A missing or refused token is answered 401
    with ``WWW-Authenticate: Bearer``.
    """
    if callable(tokens):
        lookup = tokens
    else:
        accepted = [token.encode() for token in tokens]
        if not accepted:
            raise ValueError("bearer_token needs at least one token")

        def lookup(token: str) -> str | None:
            given = token.encode()
            found = 0
            for position, candidate in enumerate(accepted, start=1):  # every one: constant time
                if hmac.compare_digest(given, candidate):
                    found = position
            return f"bearer:{found}" if found else None

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


_hooks: weakref.WeakKeyDictionary[WowRuntime, AuthHook] = weakref.WeakKeyDictionary()
_routed: weakref.WeakSet[WowRuntime] = weakref.WeakSet()
"""The runtimes whose routes took their guard (:func:`app_auth`): a later :func:`use_auth`
would not reach them."""


def use_auth(app: WowApp, auth: AuthHook) -> None:
    """Guard the routes of every runtime of ``app`` with ``auth`` (instead of the bearer
    tokens of the settings): those ``wow run`` serves, and those of ``create_app(runtime)``
    and ``router(runtime)`` in an application of your own; runtimes already built from
    ``app`` included.

    Raises ``RuntimeError`` when routes of a runtime of ``app`` were already made (they
    took their guard then, and would stay open): call it before ``create_app`` /
    ``router``."""
    served = [runtime for runtime in app.runtimes() if runtime in _routed]
    if served:
        raise RuntimeError(
            f"use_auth({app.name or 'app'!r}, ...) comes after the routes of a runtime of this app "
            "were made (create_app or router): they are not guarded by it; call use_auth first"
        )

    def remember(runtime: WowRuntime) -> None:
        _hooks[runtime] = auth

    for runtime in app.runtimes():
        remember(runtime)
    app.installer(remember)


def app_auth(runtime: WowRuntime, settings: HttpSettings | None = None) -> AuthHook | None:
    """The hook guarding ``runtime``'s routes when none is given: its app's
    (:func:`use_auth`), else the bearer tokens of ``WOW_HTTP__AUTH__BEARER_TOKENS``
    (``settings``, default the runtime's), else ``None``: every route is public."""
    _routed.add(runtime)
    hook = _hooks.get(runtime)
    if hook is not None:
        return hook
    return auth_from_settings(settings or runtime.settings.section(SECTION, HttpSettings))
