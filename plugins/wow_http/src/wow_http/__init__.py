"""wow-http: the commands and queries of a wow-py service over HTTP.

- :func:`create_app` builds a FastAPI application around a runtime; :func:`router` gives
  its routes to include in an application of your own.
- ``wow run module:app`` serves it when ``WOW_HTTP__ENABLED=true`` (:class:`HttpSettings`).
- :func:`bearer_token` and :func:`every_route` guard the routes; :func:`use_auth` gives
  ``wow run`` an app's own auth hook.
"""

from wow_http.app import create_app
from wow_http.auth import bearer_token
from wow_http.routes import AuthHook, HttpLimits, RouteInfo, every_route, router, status_of
from wow_http.server import HttpServer, server_of, use_auth
from wow_http.settings import HttpSettings

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
