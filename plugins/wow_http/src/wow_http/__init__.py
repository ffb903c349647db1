"""wow-http: the commands and queries of a wow-py service over HTTP.

- :func:`create_app` builds a FastAPI application around a runtime; :func:`router` gives
  its routes to include in an application of your own.
- ``wow run module:app`` serves it when ``WOW_HTTP__ENABLED=true`` (:class:`HttpSettings`).
- :func:`bearer_token` and :func:`every_route` guard the routes; :func:`use_auth` gives
  ``wow run`` an app's own auth hook.

Importing the package is cheap: each name is imported on first use, so loading its
plugin entry point (every ``wow`` process does) costs nothing until the feature is used.
"""

from __future__ import annotations

from wow_core._lazy import lazy_exports

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: keep the import of the package cheap
if TYPE_CHECKING:
    from wow_http.app import create_app
    from wow_http.auth import bearer_token
    from wow_http.routes import AuthHook, HttpLimits, RouteInfo, every_route, router, status_of
    from wow_http.server import HttpServer, server_of, use_auth
    from wow_http.settings import HttpSettings

_EXPORTS = {
    "create_app": "wow_http.app",
    "bearer_token": "wow_http.auth",
    "AuthHook": "wow_http.routes",
    "HttpLimits": "wow_http.routes",
    "RouteInfo": "wow_http.routes",
    "every_route": "wow_http.routes",
    "router": "wow_http.routes",
    "status_of": "wow_http.routes",
    "HttpServer": "wow_http.server",
    "server_of": "wow_http.server",
    "use_auth": "wow_http.server",
    "HttpSettings": "wow_http.settings",
}

__all__ = [
    "AuthHook",
    "HttpLimits",
    "HttpServer",
    "HttpSettings",
    "RouteInfo",
    "bearer_token",
    "create_app",
    "every_route",
    "router",
    "server_of",
    "status_of",
    "use_auth",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
