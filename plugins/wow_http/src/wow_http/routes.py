"""The HTTP API of one runtime, generated from its registered aggregates.

For every command of every aggregate the runtime hosts (``bank.account`` handling
``Deposit``)::

    POST /bank/account/{id}/Deposit        a command to aggregate {id}
    POST /bank/account/Open                a creation command: the service picks the id
    POST /bank/account/{id}/Open           a creation command with the id chosen by the caller

and for every aggregate::

    GET /bank/account/{id}/state           the current state (snapshot, then later events)
    GET /bank/account/{id}/events          its event streams, ?head_version=&tail_version=
    GET /bank/account/{id}/snapshot        its latest snapshot
    GET /wow/metadata                      what is registered

A command's body is the JSON of its body class (a dataclass or a pydantic model), read
and checked here before anything is sent: at most ``max_body_bytes`` (413), a JSON content
type (415), well-formed JSON (400 ``MALFORMED_JSON``), valid for the class and its own
``violations()`` (400 ``COMMAND_INVALID``, each violation listed). The request headers
(``Wow-Wait-Stage``, ``Wow-Wait-Timeout``, ``Wow-Wait-Function``, ``Wow-Request-Id``...)
are checked the same way (400 ``BAD_REQUEST``). The outcome maps to a status code
(:func:`status_of`): the table is in the "Serving over HTTP" page.

Not guaranteed: that a command answered 504 or 503 was not processed. The wait ended
(504), or the send failed in a way that cannot tell whether the bus took it (503); a
retry with the same ``Wow-Request-Id`` is answered as a duplicate if the first one was
decided.
"""

import inspect
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.exceptions import HTTPException

from wow_core import WowRuntime
from wow_core.command import (
    CommandResult,
    CommandStage,
    CommandValidationError,
    CommandWait,
    CommandWaitTimeoutError,
    ErrorCodes,
    VoidCommandWaitError,
    WaitPlan,
)
from wow_core.middleware import undecorated
from wow_core.model import DEFAULT_TENANT_ID, AggregateId, CommandMessage, NamedAggregate
from wow_core.model.wire import command_body_validator
from wow_core.modeling.aggregate import AggregateMetadata, CommandFunction
from wow_core.runtime.settings import mask_userinfo
from wow_http.wire import (
    AggregateMetadataBody,
    CommandMetadata,
    CommandResultBody,
    ErrorBody,
    EventsBody,
    MetadataBody,
    SnapshotBody,
    StateBody,
    ViolationBody,
    aggregate_ref,
    plain,
    result_body,
    snapshot_body,
    stream_body,
)

log = logging.getLogger("wow.http")

# -- the request headers ---------------------------------------------------------------

WAIT_STAGE = "Wow-Wait-Stage"
WAIT_TIMEOUT = "Wow-Wait-Timeout"
WAIT_FUNCTION = "Wow-Wait-Function"
REQUEST_ID = "Wow-Request-Id"
AGGREGATE_VERSION = "Wow-Aggregate-Version"
TENANT_ID = "Wow-Tenant-Id"
OPERATOR = "Wow-Operator"
VOID = "Wow-Void"
COMMAND_ID = "Wow-Command-Id"
"""The response header naming the command id (on every answer to a command that was built)."""

OPERATOR_KEY = "operator"
"""The command header key the operator is written to (``command.header["operator"]``)."""

MAX_STREAMS = 1000
"""The most event streams one ``GET .../events`` answers."""
MAX_VERSION = 2**31 - 1
_ID_MAX = 255
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_\-]*"
_WAIT_FUNCTION = re.compile(rf"^(?:{_NAME}|)(?:\.(?:{_NAME}|)){{0,2}}$")
_TOKEN = r"^[\x21-\x7e]{1,255}$"
"""Printable ASCII without spaces: request ids, tenants."""
_EVENT_STAGES = frozenset({CommandStage.PROJECTED, CommandStage.EVENT_HANDLED, CommandStage.SAGA_HANDLED})
_JSON_TYPES = re.compile(r"^application/(?:[\w.+-]+\+)?json$", re.IGNORECASE)

# -- status codes ----------------------------------------------------------------------

BAD_REQUEST = "BAD_REQUEST"
MALFORMED_JSON = "MALFORMED_JSON"
BODY_TOO_LARGE = "BODY_TOO_LARGE"
UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
WAIT_TIMEOUT_CODE = "WAIT_TIMEOUT"
SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"
SNAPSHOT_NOT_FOUND = "SNAPSHOT_NOT_FOUND"
UNAUTHORIZED = "UNAUTHORIZED"
NOT_WAITING = "NOT_WAITING"
NOT_FOUND = "NOT_FOUND"
METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"

_CODES = {401: UNAUTHORIZED, 403: "FORBIDDEN", 404: NOT_FOUND, 405: METHOD_NOT_ALLOWED}


def error_code_of(status: int) -> str:
    """The ``error_code`` of an ``HTTPException`` (an auth dependency's 401...) of ``status``."""
    return _CODES.get(status, BAD_REQUEST if status < 500 else "SERVER_ERROR")


_NOT_FOUND = frozenset({ErrorCodes.COMMAND_UNHANDLED, ErrorCodes.AGGREGATE_NOT_FOUND})
_CONFLICT = frozenset(
    {
        ErrorCodes.DUPLICATE_AGGREGATE_ID,
        ErrorCodes.COMMAND_EXPECT_VERSION_CONFLICT,
        ErrorCodes.EVENT_VERSION_CONFLICT,
    }
)


def status_of(result: CommandResult) -> int:
    """The status code of a command's result.

    200 succeeded, or a duplicate (``duplicate: true``); 400 ``COMMAND_INVALID``; 404
    ``COMMAND_UNHANDLED`` or ``AGGREGATE_NOT_FOUND``; 409 a conflict
    (``DUPLICATE_AGGREGATE_ID``, a version conflict); 500 ``PROCESSING_ERROR`` (the
    command function raised: a bug of the service, not of the caller); 422 any other
    code (a business rule refused it: the aggregate's own ``DomainError`` code).
    """
    if result.duplicate or result.succeeded:
        return 200
    code = result.error_code
    if code == ErrorCodes.COMMAND_INVALID:
        return 400
    if code in _NOT_FOUND:
        return 404
    if code in _CONFLICT:
        return 409
    if code == ErrorCodes.PROCESSING_ERROR:
        return 500
    return 422


class HttpError(Exception):
    """A request answered with an :class:`ErrorBody` (nothing was sent)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        errors: list[ViolationBody] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = ErrorBody(error_code=code, error_msg=message, errors=errors or [], **extra)

    def response(self) -> JSONResponse:
        headers = {COMMAND_ID: self.body.command_id} if self.body.command_id else None
        return JSONResponse(self.body.model_dump(mode="json"), status_code=self.status, headers=headers)


def validation_violations(error: RequestValidationError | ValidationError) -> list[ViolationBody]:
    """The violations of a pydantic or FastAPI validation error, one per failed rule."""
    found = []
    for item in error.errors():
        location = [str(part) for part in item.get("loc", ())]
        if location[:1] == ["header"] and len(location) > 1:
            location = ["header", location[1]]
        found.append(ViolationBody(path=".".join(location), message=str(item.get("msg", ""))))
    return found


class WowRoute(APIRoute):
    """Answers a request FastAPI refuses (a header, a path or a query parameter that is
    not valid) with 400 and the violations, the API's own error form, instead of 422, and
    an ``HTTPException`` of a dependency (an auth hook's 401) in that form too, its
    headers kept: the same in an app of the user's, whose error handlers are not changed."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as error:
                violations = validation_violations(error)
                listed = "; ".join(f"{v.path}: {v.message}" for v in violations)
                return HttpError(400, BAD_REQUEST, f"invalid request: {listed}", violations).response()
            except HttpError as error:
                return error.response()
            except HTTPException as error:
                body = ErrorBody(error_code=error_code_of(error.status_code), error_msg=str(error.detail))
                return JSONResponse(
                    body.model_dump(mode="json"), status_code=error.status_code, headers=error.headers
                )

        return handle


# -- authentication --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """One route of the API, as the auth hook sees it (to decide who may call it)."""

    kind: Literal["command", "query", "metadata", "wait"]
    method: str
    path: str
    named_aggregate: NamedAggregate | None = None
    command: str = ""
    """The command's name (its body class), for a command route."""


AuthHook = Callable[[RouteInfo], Callable[..., Any] | None]
"""``hook(route)`` returns the FastAPI dependency that guards ``route`` (``None``: public).

The dependency raises (``HTTPException(401)``...) to refuse the request; what it returns,
if it is a string, is the authenticated principal, written into the command's header as
its operator (a client's ``Wow-Operator`` is then ignored)."""


def every_route(dependency: Callable[..., Any]) -> AuthHook:
    """An auth hook guarding every route with the same ``dependency``."""

    def hook(route: RouteInfo) -> Callable[..., Any]:
        return dependency

    return hook


def _principal_of(dependency: Callable[..., Any]) -> Callable[..., Any]:
    async def capture(request: Request, principal: Annotated[Any, Depends(dependency)]) -> None:
        request.state.wow_principal = principal if isinstance(principal, str) else None

    return capture


# -- bodies ----------------------------------------------------------------------------


def inline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` references replaced by their definitions (the OpenAPI
    document of a router cannot add components; a recursive reference becomes ``{}``)."""
    definitions: dict[str, Any] = schema.pop("$defs", {})

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.removeprefix("#/$defs/")
                if name in seen or name not in definitions:
                    return {}
                rest = {k: resolve(v, seen) for k, v in node.items() if k != "$ref"}
                return {**resolve(definitions[name], (*seen, name)), **rest}
            return {key: resolve(value, seen) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item, seen) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema, ())
    return resolved


@dataclass(frozen=True, slots=True)
class _RawReader:
    """Reads a JSON request body of at most ``max_bytes`` (413 past it, 415 for another type)."""

    max_bytes: int

    async def read(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise HttpError(400, BAD_REQUEST, "Content-Length is not a number")
            if int(declared) > self.max_bytes:
                raise HttpError(413, BODY_TOO_LARGE, f"the body is over the limit of {self.max_bytes} bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_bytes:
                raise HttpError(413, BODY_TOO_LARGE, f"the body is over the limit of {self.max_bytes} bytes")
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw.strip():
            return b""
        content_type = request.headers.get("content-type", "").split(";", 1)[0].strip()
        if not _JSON_TYPES.match(content_type):
            raise HttpError(
                415,
                UNSUPPORTED_MEDIA_TYPE,
                "a body is JSON (Content-Type: application/json), not " + (content_type or "untyped"),
            )
        return raw


@dataclass(frozen=True, slots=True)
class _BodyReader:
    """Reads and validates one command class's body from a request, by the rules a
    receiver applies to it from the wire (the codec's validator; ``strict``:
    ``WOW_COMMAND__STRICT_BODIES``)."""

    body_type: type[Any]
    adapter: TypeAdapter[Any]
    max_bytes: int
    validate: Callable[[bytes], Any]

    @property
    def schema(self) -> dict[str, Any]:
        return inline_schema(self.adapter.json_schema())

    async def read(self, request: Request) -> Any:
        raw = await _RawReader(self.max_bytes).read(request) or b"{}"
        try:
            return self.validate(raw)
        except ValidationError as error:
            if any(item["type"] == "json_invalid" for item in error.errors()):
                raise HttpError(400, MALFORMED_JSON, "the body is not well-formed JSON") from None
            violations = validation_violations(error)
            listed = "; ".join(f"{v.path}: {v.message}" if v.path else v.message for v in violations)
            raise HttpError(
                400,
                ErrorCodes.COMMAND_INVALID,
                f"the {self.body_type.__name__} body is invalid: {listed}",
                violations,
            ) from None


def _body_reader(body_type: type[Any], max_bytes: int, *, strict: bool) -> _BodyReader | None:
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(body_type)
        adapter.json_schema()
    except Exception as error:
        log.warning(
            "no HTTP route for %s: pydantic cannot read it from JSON (%s); "
            "make it a dataclass or a pydantic model",
            body_type.__qualname__,
            error,
        )
        return None
    return _BodyReader(body_type, adapter, max_bytes, command_body_validator(body_type, strict=strict))


# -- wait plans ------------------------------------------------------------------------


def wait_plan(stage: CommandStage, function: str | None) -> WaitPlan:
    """The plan of ``Wow-Wait-Stage`` and ``Wow-Wait-Function``.

    ``Wow-Wait-Function`` names the function waited for, read from the right:
    ``function``, ``processor.function`` or ``context.processor.function`` (an empty part
    matches any; an empty header is no header); only with ``PROJECTED``,
    ``EVENT_HANDLED`` or ``SAGA_HANDLED``.
    """
    function = function or None
    if function is not None and stage not in _EVENT_STAGES:
        raise HttpError(
            400,
            BAD_REQUEST,
            f"{WAIT_FUNCTION} goes with a {WAIT_STAGE} of PROJECTED, EVENT_HANDLED or SAGA_HANDLED, "
            f"not {stage.value}",
        )
    if stage is CommandStage.SENT:
        return CommandWait.sent()
    if stage is CommandStage.PROCESSED:
        return CommandWait.processed()
    if stage is CommandStage.SNAPSHOT:
        return CommandWait.snapshot()
    parts = (function or "").split(".")
    context, processor, name = ["", "", *parts][-3:]
    return WaitPlan(stage, False, context, processor, name)


# -- the router ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The limits of every request."""

    max_body_bytes: int = 1024 * 1024
    max_wait_timeout: float = 300.0


_COMMAND_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": CommandResultBody,
        "description": "The stage was reached (or a duplicate).",
    },
    400: {"model": ErrorBody, "description": "A body, header or id that is not valid; nothing was sent."},
    401: {"model": ErrorBody, "description": "Not authenticated (when an auth hook guards the route)."},
    404: {"model": CommandResultBody, "description": "COMMAND_UNHANDLED or AGGREGATE_NOT_FOUND."},
    409: {
        "model": CommandResultBody,
        "description": "DUPLICATE_AGGREGATE_ID or a version conflict.",
    },
    413: {"model": ErrorBody, "description": "The body is over the limit; nothing was sent."},
    415: {"model": ErrorBody, "description": "The body is not JSON; nothing was sent."},
    422: {"model": CommandResultBody, "description": "A business rule refused the command (its code)."},
    500: {"model": CommandResultBody, "description": "PROCESSING_ERROR: the command function raised."},
    503: {"model": ErrorBody, "description": "The command could not be sent (bus or transport failure)."},
    504: {
        "model": ErrorBody,
        "description": "WAIT_TIMEOUT: the deadline passed (see last_stage).",
    },
}
_QUERY_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "An id or a version range that is not valid."},
    401: {"model": ErrorBody, "description": "Not authenticated (when an auth hook guards the route)."},
    404: {"model": ErrorBody, "description": "AGGREGATE_NOT_FOUND (or SNAPSHOT_NOT_FOUND)."},
    503: {"model": ErrorBody, "description": "The event store or snapshot repository failed."},
}


def router(
    runtime: WowRuntime,
    *,
    limits: HttpLimits | None = None,
    auth: AuthHook | None = None,
    prefix: str = "",
) -> APIRouter:
    """The routes of ``runtime``'s aggregates: include it in any FastAPI app.

    ``auth`` guards them; without it, what guards the routes ``wow run`` serves does: the
    hook of the runtime's app (:func:`~wow_http.use_auth`), else the bearer tokens of
    ``WOW_HTTP__AUTH__BEARER_TOKENS`` (an explicitly public API: ``auth=lambda route:
    None``). The runtime must be started before the first request (``async with
    runtime:`` in the app's lifespan); :func:`wow_http.create_app` builds a whole app
    around it.
    """
    from wow_http.auth import app_auth

    limits = limits or HttpLimits()
    auth = auth if auth is not None else app_auth(runtime)
    api = APIRouter(prefix=prefix, route_class=WowRoute)
    routes = _Routes(runtime, limits, auth, prefix)
    for metadata in sorted(runtime.aggregates, key=lambda m: str(m.named_aggregate)):
        routes.add_aggregate(api, metadata)
    routes.add_metadata(api)
    routes.add_wait(api)
    for context in sorted({m.named_aggregate.context_name for m in runtime.aggregates}):
        routes.add_unhandled(api, context)
    return api


class _Routes:
    def __init__(self, runtime: WowRuntime, limits: HttpLimits, auth: AuthHook | None, prefix: str) -> None:
        self.runtime = runtime
        self.limits = limits
        self.auth = auth
        self.prefix = prefix
        self.commands: dict[NamedAggregate, list[CommandMetadata]] = {}

    def guard(self, route: RouteInfo) -> list[Any]:
        dependency = self.auth(route) if self.auth is not None else None
        return [] if dependency is None else [Depends(_principal_of(dependency))]

    # -- commands ------------------------------------------------------------------------

    def add_aggregate(self, api: APIRouter, metadata: AggregateMetadata[Any]) -> None:
        named = metadata.named_aggregate
        base = f"/{named.context_name}/{named.aggregate_name}"
        listed = self.commands.setdefault(named, [])
        for body_type, function in sorted(metadata.commands.items(), key=lambda item: item[0].__name__):
            reader = _body_reader(
                body_type, self.limits.max_body_bytes, strict=self.runtime.settings.command.strict_bodies
            )
            if reader is None:
                continue
            name = body_type.__name__
            paths = [f"{base}/{{id}}/{name}"]
            if function.create:
                paths.insert(0, f"{base}/{name}")
            for path in paths:
                with_id = "{id}" in path
                route = RouteInfo("command", "POST", self.prefix + path, named, name)
                api.add_api_route(
                    path,
                    self.command_endpoint(metadata, function, reader, with_id),
                    methods=["POST"],
                    name=f"{named}.{name}" + ("" if with_id else ".new"),
                    operation_id=f"{named.context_name}.{named.aggregate_name}.{name}"
                    + ("" if with_id else ".new"),
                    summary=f"{name} ({named})" + ("" if with_id else ", a new id"),
                    description=(body_type.__doc__ or "").strip() or None,
                    tags=[str(named)],
                    responses=_COMMAND_RESPONSES,
                    response_model=CommandResultBody,
                    dependencies=self.guard(route),
                    openapi_extra={
                        "requestBody": {
                            "required": False,
                            "content": {"application/json": {"schema": reader.schema}},
                        }
                    },
                )
                listed.append(CommandMetadata(name=name, create=function.create, path=self.prefix + path))
        self.add_queries(api, metadata, base)

    def command_endpoint(
        self,
        metadata: AggregateMetadata[Any],
        function: CommandFunction,
        reader: _BodyReader,
        with_id: bool,
    ) -> Callable[..., Awaitable[Response]]:
        runtime = self.runtime
        max_timeout = self.limits.max_wait_timeout

        async def endpoint(
            request: Request,
            wait_stage: Annotated[
                CommandStage | None,
                Header(
                    alias=WAIT_STAGE,
                    description="The stage to wait for (default PROCESSED; SENT for a Void command).",
                ),
            ] = None,
            wait_timeout: Annotated[
                float | None,
                Header(
                    alias=WAIT_TIMEOUT,
                    gt=0,
                    le=max_timeout,
                    allow_inf_nan=False,
                    description=f"Seconds to wait, at most {max_timeout:g} (default: the service's).",
                ),
            ] = None,
            wait_function: Annotated[
                str | None,
                Header(
                    alias=WAIT_FUNCTION,
                    max_length=255,
                    pattern=_WAIT_FUNCTION.pattern,
                    description="function, processor.function or context.processor.function.",
                ),
            ] = None,
            request_id: Annotated[
                str | None,
                Header(alias=REQUEST_ID, pattern=_TOKEN, description="Idempotency key."),
            ] = None,
            aggregate_version: Annotated[
                int | None,
                Header(alias=AGGREGATE_VERSION, ge=0, le=MAX_VERSION, description="The version expected."),
            ] = None,
            tenant_id: Annotated[str | None, Header(alias=TENANT_ID, pattern=_TOKEN)] = None,
            operator: Annotated[
                str | None, Header(alias=OPERATOR, max_length=255, description="Who sends (without auth).")
            ] = None,
            void: Annotated[bool, Header(alias=VOID, description="Fire and forget (SENT only).")] = False,
        ) -> Response:
            aggregate_id = request.path_params.get("id") if with_id else None
            if aggregate_id is not None and not 0 < len(aggregate_id) <= _ID_MAX:
                raise HttpError(400, BAD_REQUEST, f"an aggregate id has 1 to {_ID_MAX} characters")
            if wait_stage is None:
                wait_stage = CommandStage.SENT if void else CommandStage.PROCESSED
            plan = wait_plan(wait_stage, wait_function)
            if void and not plan.supports_void:
                raise HttpError(
                    400,
                    BAD_REQUEST,
                    f"a Void command is waited for until SENT only, not {plan}",
                )
            body = await reader.read(request)
            principal = getattr(request.state, "wow_principal", None)
            who = principal if principal is not None else operator
            try:
                command = runtime.aggregates.command(
                    body,
                    aggregate_id,
                    tenant_id=tenant_id or DEFAULT_TENANT_ID,
                    request_id=request_id or "",
                    aggregate_version=aggregate_version,
                    header={OPERATOR_KEY: who} if who else None,
                    is_void=void,
                )
            except ValueError as error:
                raise HttpError(400, BAD_REQUEST, str(error)) from None
            headers = {COMMAND_ID: command.id}
            if _wants_stream(request):
                stream = runtime.gateway.send_and_wait_stream(command, plan, timeout=wait_timeout)
                try:
                    first = await anext(stream)
                except Exception as error:
                    await _close(stream)
                    return _failure(error, command).response()
                return StreamingResponse(
                    _server_sent_events(first, stream, command),
                    media_type="text/event-stream",
                    headers={**headers, "Cache-Control": "no-store", "X-Accel-Buffering": "no"},
                )
            try:
                result = await runtime.gateway.send_and_wait(command, plan, timeout=wait_timeout)
            except Exception as error:
                return _failure(error, command).response()
            return JSONResponse(
                result_body(result).model_dump(mode="json"), status_code=status_of(result), headers=headers
            )

        return _with_id_parameter(endpoint) if with_id else endpoint

    # -- queries -------------------------------------------------------------------------

    def add_queries(self, api: APIRouter, metadata: AggregateMetadata[Any], base: str) -> None:
        named = metadata.named_aggregate
        runtime = self.runtime
        kernel = undecorated(runtime.kernel)

        def aggregate_id(id: str, tenant: str | None) -> AggregateId:
            return AggregateId(named, id, tenant or DEFAULT_TENANT_ID)

        Id = Annotated[str, Path(min_length=1, max_length=_ID_MAX, description="The aggregate id.")]
        Tenant = Annotated[str | None, Header(alias=TENANT_ID, pattern=_TOKEN)]

        async def state(id: Id, tenant_id: Tenant = None) -> Response:
            target = aggregate_id(id, tenant_id)
            version, current = await _store_call(kernel.load_state(metadata, target))
            if version == 0:
                raise HttpError(404, ErrorCodes.AGGREGATE_NOT_FOUND, f"aggregate {target} does not exist")
            body = StateBody(aggregate=aggregate_ref(target), version=version, state=plain(current))
            return JSONResponse(body.model_dump(mode="json"))

        async def events(
            id: Id,
            head_version: Annotated[int, Query(ge=1, le=MAX_VERSION, description="The first version.")] = 1,
            tail_version: Annotated[
                int | None,
                Query(ge=1, le=MAX_VERSION, description=f"The last version (at most {MAX_STREAMS} streams)."),
            ] = None,
            tenant_id: Tenant = None,
        ) -> Response:
            target = aggregate_id(id, tenant_id)
            if tail_version is not None and tail_version < head_version:
                raise HttpError(
                    400, BAD_REQUEST, f"tail_version {tail_version} is before head_version {head_version}"
                )
            last = head_version + MAX_STREAMS - 1
            if tail_version is not None and tail_version > last:
                raise HttpError(
                    400, BAD_REQUEST, f"at most {MAX_STREAMS} streams at once: tail_version is at most {last}"
                )
            tail = min(last, tail_version) if tail_version is not None else min(last, MAX_VERSION)
            streams = await _store_call(runtime.event_store.load(target, head_version, tail))
            if not streams and head_version == 1:
                raise HttpError(404, ErrorCodes.AGGREGATE_NOT_FOUND, f"aggregate {target} does not exist")
            body = EventsBody(
                aggregate=aggregate_ref(target),
                head_version=head_version,
                tail_version=tail_version,
                streams=[stream_body(stream) for stream in streams],
            )
            return JSONResponse(body.model_dump(mode="json"))

        async def snapshot(id: Id, tenant_id: Tenant = None) -> Response:
            target = aggregate_id(id, tenant_id)
            found = await _store_call(runtime.snapshot_repository.load(target))
            if found is None:
                raise HttpError(404, SNAPSHOT_NOT_FOUND, f"aggregate {target} has no snapshot")
            return JSONResponse(snapshot_body(found).model_dump(mode="json"))

        queries: list[tuple[str, Callable[..., Awaitable[Response]], type[Any], str]] = [
            ("state", state, StateBody, "The current state (the snapshot, then the later events)."),
            ("events", events, EventsBody, "The event streams of a version range."),
            ("snapshot", snapshot, SnapshotBody, "The latest snapshot."),
        ]
        for name, endpoint, model, summary in queries:
            path = f"{base}/{{id}}/{name}"
            api.add_api_route(
                path,
                endpoint,
                methods=["GET"],
                name=f"{named}.{name}",
                operation_id=f"{named.context_name}.{named.aggregate_name}.{name}",
                summary=summary,
                tags=[str(named)],
                response_model=model,
                responses=_QUERY_RESPONSES,
                dependencies=self.guard(RouteInfo("query", "GET", self.prefix + path, named, name)),
            )

    def add_metadata(self, api: APIRouter) -> None:
        runtime = self.runtime

        async def metadata() -> MetadataBody:
            return MetadataBody(
                service=runtime.name,
                aggregates=[
                    AggregateMetadataBody(
                        context=m.named_aggregate.context_name,
                        aggregate=m.named_aggregate.aggregate_name,
                        state=m.state_type.__name__,
                        commands=self.commands.get(m.named_aggregate, []),
                        events=[t.__name__ for t in m.event_types()],
                    )
                    for m in sorted(runtime.aggregates, key=lambda m: str(m.named_aggregate))
                ],
            )

        api.add_api_route(
            "/wow/metadata",
            metadata,
            methods=["GET"],
            name="wow.metadata",
            operation_id="wow.metadata",
            summary="The aggregates, commands and events this service hosts.",
            tags=["wow"],
            response_model=MetadataBody,
            responses={401: _QUERY_RESPONSES[401]},
            dependencies=self.guard(RouteInfo("metadata", "GET", self.prefix + "/wow/metadata")),
        )

    def add_wait(self, api: APIRouter) -> None:
        """``POST /wow/waits/{process}``: the receiving half of the http wait notifier."""
        from wow_core.command.signal_wire import MAX_SIGNAL_BYTES
        from wow_http.wait_notifier import WAIT_PATH, receiver

        reader = _RawReader(MAX_SIGNAL_BYTES)

        async def wait_signal(
            request: Request,
            process: Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="The waiting process.")],
        ) -> Response:
            sink = receiver(process)
            if sink is None:
                raise HttpError(404, NOT_WAITING, f"process {process} waits for nothing here")
            sink(await reader.read(request))
            return Response(status_code=202)

        path = WAIT_PATH + "/{process}"
        api.add_api_route(
            path,
            wait_signal,
            methods=["POST"],
            name="wow.wait_signal",
            operation_id="wow.wait_signal",
            summary="A wait signal for a command this process waits for (the http wait notifier).",
            tags=["wow"],
            status_code=202,
            responses={
                400: _QUERY_RESPONSES[400],
                401: _QUERY_RESPONSES[401],
                404: {"model": ErrorBody, "description": "NOT_WAITING: no such process waits here."},
                413: _COMMAND_RESPONSES[413],
                415: _COMMAND_RESPONSES[415],
            },
            dependencies=self.guard(RouteInfo("wait", "POST", self.prefix + path)),
            openapi_extra={
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        )

    def add_unhandled(self, api: APIRouter, context: str) -> None:
        """``/{context}/...`` that no route matched: a POST 404 ``COMMAND_UNHANDLED`` (a
        command that is not a creation command, sent without an id, is told so); a GET
        404 ``NOT_FOUND`` (an aggregate this service does not host...), or 405 on a
        command's route."""

        async def unhandled(request: Request, rest: str) -> Response:
            aggregate, _, tail = rest.partition("/")
            listed = self.commands.get(NamedAggregate(context, aggregate), [])
            message = f"no aggregate of this service handles POST {request.url.path}"
            if tail and "/" not in tail and any(c.name == tail and not c.create for c in listed):
                message = (
                    f"{tail} is not a creation command of {context}.{aggregate}: it goes to an "
                    f"aggregate, POST /{context}/{aggregate}/{{id}}/{tail}"
                )
            return HttpError(404, ErrorCodes.COMMAND_UNHANDLED, message).response()

        async def not_found(request: Request, rest: str) -> Response:
            aggregate, _, tail = rest.partition("/")
            named = NamedAggregate(context, aggregate)
            if named not in self.commands:
                return HttpError(404, NOT_FOUND, f"this service hosts no aggregate {named}").response()
            if any(c.name == tail.rpartition("/")[2] for c in self.commands[named]):
                message = f"{request.url.path} takes a command: POST it"
                refused = ErrorBody(error_code=METHOD_NOT_ALLOWED, error_msg=message)
                allow = {"Allow": "POST"}
                return JSONResponse(refused.model_dump(mode="json"), status_code=405, headers=allow)
            return HttpError(404, NOT_FOUND, f"no route GET {request.url.path}").response()

        path = f"/{context}/{{rest:path}}"
        api.add_api_route(path, unhandled, methods=["POST"], include_in_schema=False)
        api.add_api_route(path, not_found, methods=["GET"], include_in_schema=False)


def _failure(error: Exception, command: CommandMessage[Any]) -> HttpError:
    """The answer to a command the gateway raised for (nothing was sent, or the wait ended)."""
    if isinstance(error, CommandValidationError):
        violations = [ViolationBody(path=v.path, message=v.message) for v in error.violations]
        return HttpError(400, ErrorCodes.COMMAND_INVALID, str(error), violations, command_id=command.id)
    if isinstance(error, VoidCommandWaitError):
        return HttpError(400, BAD_REQUEST, str(error), command_id=command.id)
    if isinstance(error, CommandWaitTimeoutError):
        return HttpError(
            504,
            WAIT_TIMEOUT_CODE,
            str(error),
            command_id=command.id,
            wait_stage=error.wait_stage,
            last_stage=error.last_stage,
        )
    log.warning("command %s %s could not be sent: %r", command.name, command.id, error)
    return HttpError(
        503,
        SERVICE_UNAVAILABLE,
        mask_userinfo(f"the command could not be sent: {type(error).__name__}: {error}"),
        command_id=command.id,
    )


async def _close(stream: AsyncIterator[Any]) -> None:
    """End a stream's wait now (an async generator's ``aclose``), not when it is collected."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


def _wants_stream(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return any(part.split(";", 1)[0].strip().lower() == "text/event-stream" for part in accept.split(","))


def _event(name: str, data: BaseModel) -> bytes:
    return f"event: {name}\ndata: {data.model_dump_json()}\n\n".encode()


async def _server_sent_events(
    first: CommandResult, stream: AsyncIterator[CommandResult], command: CommandMessage[Any]
) -> AsyncIterator[bytes]:
    """One ``event: <STAGE>`` per stage reached (its data the result), the last one the
    stage waited for; a wait that ends early closes with ``event: error`` (its data the
    error: ``WAIT_TIMEOUT`` with the last stage reached, ``SERVICE_UNAVAILABLE``)."""
    try:
        yield _event(first.stage.value, result_body(first))
        async for result in stream:
            yield _event(result.stage.value, result_body(result))
    except Exception as error:
        yield _event("error", _failure(error, command).body)
    finally:
        await _close(stream)


def _with_id_parameter(endpoint: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
    """``endpoint`` declaring the path parameter ``id`` (for the schema; it reads it itself)."""
    signature = inspect.signature(endpoint)
    parameter = inspect.Parameter(
        "id",
        inspect.Parameter.KEYWORD_ONLY,
        annotation=Annotated[str, Path(min_length=1, max_length=_ID_MAX, description="The aggregate id.")],
    )
    parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in signature.parameters.values()]
    first, rest = parameters[0], parameters[1:]

    async def with_id(**arguments: Any) -> Response:
        arguments.pop("id", None)
        return await endpoint(**arguments)

    with_id.__signature__ = signature.replace(parameters=[first, parameter, *rest])  # type: ignore[attr-defined]
    return with_id


async def _store_call(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except HttpError:
        raise
    except ValueError as error:
        raise HttpError(400, BAD_REQUEST, str(error)) from None
    except Exception as error:
        log.warning("a query failed: %r", error)
        raise HttpError(
            503, SERVICE_UNAVAILABLE, mask_userinfo(f"the store failed: {type(error).__name__}: {error}")
        ) from None
