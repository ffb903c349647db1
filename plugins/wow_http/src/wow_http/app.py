"""``create_app``: a whole FastAPI application around one runtime.

What :func:`wow_http.routes.router` adds to it: CORS from the settings, every error of
FastAPI itself (an unknown path, a method not allowed, an auth dependency's
``HTTPException``) answered in the API's error form (``{"error_code", "error_msg"}``),
and optionally the runtime started and stopped with the app (``manage_runtime``: when
uvicorn, not ``wow run``, serves it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

import wow_core
from wow_core import WowRuntime
from wow_core.command import ErrorCodes
from wow_http.auth import app_auth
from wow_http.routes import AuthHook, HttpLimits, error_code_of, router
from wow_http.settings import HttpSettings


def tidy_openapi(document: dict[str, Any]) -> dict[str, Any]:
    """The document FastAPI generates, said as the API behaves: an optional header is
    absent or a value, never ``null`` (FastAPI writes ``anyOf: [X, null]``); a request
    FastAPI itself refuses is answered 400, never with its 422 ``HTTPValidationError``."""
    for path in document.get("paths", {}).values():
        for operation in path.values():
            for parameter in operation.get("parameters", []):
                schema = parameter.get("schema", {})
                options = schema.get("anyOf")
                if isinstance(options, list) and {"type": "null"} in options and len(options) == 2:
                    (kept,) = [option for option in options if option != {"type": "null"}]
                    parameter["schema"] = {**{k: v for k, v in schema.items() if k != "anyOf"}, **kept}
            responses = operation.get("responses", {})
            if "HTTPValidationError" in str(responses.get("422", "")):
                del responses["422"]
    schemas = document.get("components", {}).get("schemas", {})
    if "HTTPValidationError" not in str(document.get("paths")):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
    return document


def settings_of(runtime: WowRuntime) -> HttpSettings:
    """The ``WOW_HTTP__*`` section of ``runtime``'s settings."""
    from wow_http.settings import SECTION

    return runtime.settings.section(SECTION, HttpSettings)


def create_app(
    runtime: WowRuntime,
    settings: HttpSettings | None = None,
    *,
    auth: AuthHook | None = None,
    manage_runtime: bool = False,
) -> FastAPI:
    """The FastAPI app serving ``runtime`` (settings: ``WOW_HTTP__*`` of the runtime).

    ``auth`` guards the routes (:data:`~wow_http.routes.AuthHook`); without it, the
    app's (:func:`~wow_http.use_auth`) does, else the bearer tokens of
    ``WOW_HTTP__AUTH__BEARER_TOKENS``, if any are set.
    """
    settings = settings or settings_of(runtime)
    hook = auth if auth is not None else app_auth(runtime, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if manage_runtime:
            async with runtime:
                yield
        else:
            yield

    app = FastAPI(
        title=f"{runtime.name} (wow-py)",
        version=wow_core.__version__,
        description=f"Commands and queries of the {runtime.name} service, generated from its aggregates.",
        root_path=settings.root_path,
        lifespan=lifespan,
    )
    app.include_router(
        router(
            runtime,
            limits=HttpLimits(settings.max_body_bytes, settings.max_wait_timeout),
            auth=hook,
        )
    )
    app.state.wow_auth = hook
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = tidy_openapi(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    if settings.cors.allow_origins:
        cors = settings.cors
        app.add_middleware(
            CORSMiddleware,
            allow_origins=cors.allow_origins,
            allow_methods=cors.allow_methods,
            allow_headers=cors.allow_headers,
            allow_credentials=cors.allow_credentials,
            max_age=cors.max_age,
            expose_headers=["Wow-Command-Id"],
        )

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        code = error_code_of(error.status_code)
        if error.status_code == 404 and request.method == "POST":
            code = ErrorCodes.COMMAND_UNHANDLED
        message: Any = error.detail
        return JSONResponse(
            {"error_code": code, "error_msg": str(message), "errors": []},
            status_code=error.status_code,
            headers=dict(error.headers or {}),
        )

    return app
