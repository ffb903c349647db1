"""``wow openapi`` and ``wow send``.

``wow openapi module:app`` prints the OpenAPI document of the app's HTTP API (what
``wow run`` serves with ``WOW_HTTP__ENABLED=true``), without starting anything.

``wow send bank.account OpenAccount '{"owner": "ada"}' --wait PROCESSED [--id ID]``
sends one command and prints its result as JSON. Over HTTP by default (``--url``,
default ``http://127.0.0.1:8080`` or ``WOW_HTTP__PORT``); with ``--transport
module:app`` directly over the configured transport (``WOW_TRANSPORT``...), the app
naming the body classes only: this process hosts no aggregate.

The body is checked by the rules the service applies to it (``WOW_COMMAND__STRICT_BODIES``:
unknown fields and lax coercions refused), over HTTP by the service, with ``--transport``
before anything is sent.

Exit status: 0 the stage was reached (or a duplicate), 1 the command was refused (an
invalid body, an unknown aggregate or command, a token refused, a business rule, a
conflict), 2 a usage error (wrong arguments, a body that is not JSON, a wrong
``module:app`` or setting), 3 the wait timed out, 4 the service or the transport could not
be reached, or could not send. Every message starts with ``wow send:``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from wow_core.plugins import Command
from wow_core.settings import SettingsError

SUCCEEDED, REFUSED, USAGE, TIMED_OUT, UNAVAILABLE = 0, 1, 2, 3, 4


# -- wow openapi ---------------------------------------------------------------------------


def _configure_openapi(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app", help="the service, as module:attribute (a WowApp)")


def openapi_document(runtime: Any) -> dict[str, Any]:
    from wow_http.app import create_app

    document: dict[str, Any] = create_app(runtime).openapi()
    return document


def _run_openapi(invocation: Any) -> int:
    from wow_core.runtime.serve import load_app

    app = load_app(invocation.args.app)
    runtime = app.runtime(invocation.settings(), plugins=invocation.plugins)
    invocation.out.write(json.dumps(openapi_document(runtime), indent=2) + "\n")
    return 0


# -- wow send ------------------------------------------------------------------------------


def _configure_send(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("aggregate", help="context.aggregate, e.g. bank.account")
    # Not dest="command": the top-level parser keeps the subcommand's name there.
    parser.add_argument(
        "command_name", metavar="command", help="the command's name (its body class), e.g. OpenAccount"
    )
    parser.add_argument("body", nargs="?", default="{}", help="the body as JSON (default {})")
    parser.add_argument("--id", help="the aggregate id (omit it for a creation command: a new id)")
    parser.add_argument("--wait", default="PROCESSED", help="the stage to wait for (default PROCESSED)")
    parser.add_argument("--wait-function", help="for event stages: [[context.]processor.]function")
    parser.add_argument("--timeout", type=float, help="seconds to wait (default: the service's)")
    parser.add_argument("--request-id", help="idempotency key: a retry with it is a duplicate")
    parser.add_argument("--operator", help="who sends (written into the command's header)")
    parser.add_argument("--token", help="a bearer token (default: $WOW_HTTP_TOKEN)")
    parser.add_argument("--url", help="the service's base URL (default http://127.0.0.1:$WOW_HTTP__PORT)")
    parser.add_argument(
        "--transport",
        metavar="MODULE:APP",
        help="send over the configured transport instead of HTTP; the app names the body classes",
    )


_USAGE_CODES = frozenset({"BAD_REQUEST", "MALFORMED_JSON"})
"""The codes of a request the command line itself got wrong (a header, the body's JSON)."""


def _exit_status(status: int, body: Any) -> int:
    if status == 200:
        return SUCCEEDED
    if status == 504:
        return TIMED_OUT
    if status in (502, 503) or (status >= 500 and not isinstance(body, dict)):
        return UNAVAILABLE
    if isinstance(body, dict) and body.get("error_code") in _USAGE_CODES:
        return USAGE
    return REFUSED


def _refused(message: str) -> int:
    print(f"wow send: {message}", file=sys.stderr)
    return REFUSED


def _parse_aggregate(text: str) -> tuple[str, str]:
    context, sep, aggregate = text.partition(".")
    if not sep or not context or not aggregate:
        raise SettingsError(f"{text!r} is not context.aggregate (for example bank.account)")
    return context, aggregate


def _send_http(invocation: Any) -> int:
    import os

    import httpx

    from wow_http.routes import OPERATOR, REQUEST_ID, WAIT_FUNCTION, WAIT_STAGE, WAIT_TIMEOUT

    args = invocation.args
    context, aggregate = _parse_aggregate(args.aggregate)
    if args.url:
        base = args.url.rstrip("/")
    else:
        from wow_http.settings import SECTION, HttpSettings

        settings = invocation.settings().section(SECTION, HttpSettings)
        base = f"http://127.0.0.1:{settings.port}{settings.root_path}"
    path = f"/{context}/{aggregate}" + (f"/{args.id}" if args.id else "") + f"/{args.command_name}"
    headers = {WAIT_STAGE: args.wait.upper(), "Content-Type": "application/json"}
    for name, value in (
        (WAIT_TIMEOUT, None if args.timeout is None else repr(args.timeout)),
        (WAIT_FUNCTION, args.wait_function),
        (REQUEST_ID, args.request_id),
        (OPERATOR, args.operator),
    ):
        if value is not None:
            headers[name] = value
    token = args.token or os.environ.get("WOW_HTTP_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    deadline = (args.timeout or 300.0) + 10.0
    try:
        response = httpx.post(base + path, content=args.body.encode(), headers=headers, timeout=deadline)
    except httpx.HTTPError as error:
        print(f"wow send: {base} cannot be reached: {error}", file=sys.stderr)
        return UNAVAILABLE
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    invocation.out.write((json.dumps(body, indent=2) if not isinstance(body, str) else body) + "\n")
    unhandled = isinstance(body, dict) and body.get("error_code") == "COMMAND_UNHANDLED"
    if unhandled and not args.id:
        print("wow send: no --id given: only a creation command goes without one", file=sys.stderr)
    return _exit_status(response.status_code, body)


def _send_transport(invocation: Any) -> int:
    from pydantic import ValidationError

    from wow_core import WowApp
    from wow_core.command import (
        CommandStage,
        CommandValidationError,
        CommandWaitTimeoutError,
        VoidCommandWaitError,
    )
    from wow_core.model import NamedAggregate
    from wow_core.model.wire import command_body_validator
    from wow_core.modeling.registry import AggregateRegistry, UnknownCommandError
    from wow_core.runtime.runtime import StartError
    from wow_core.runtime.serve import load_app
    from wow_http.routes import OPERATOR_KEY, HttpError, validation_violations, wait_plan
    from wow_http.wire import result_body

    args = invocation.args
    context, aggregate = _parse_aggregate(args.aggregate)
    named = NamedAggregate(context, aggregate)
    try:
        plan = wait_plan(CommandStage(args.wait.upper()), args.wait_function)
    except (ValueError, HttpError) as error:
        raise SettingsError(str(error)) from None
    settings = invocation.settings()
    service = load_app(args.transport)
    body_types = {
        cls.__name__: cls for cls in (*service.body_types, *_command_types(service)) if isinstance(cls, type)
    }
    body_type = body_types.get(args.command_name)
    if body_type is None:
        known = ", ".join(sorted(body_types))
        return _refused(f"{args.transport} has no command {args.command_name!r}; its commands: {known}")
    # The service's aggregates, known here only to address the command (create or not).
    registry = AggregateRegistry(service.aggregates)
    if registry.get(named) is None:
        return _refused(f"{args.transport} hosts no aggregate {named}")
    try:
        # What the service's own decoder applies (WOW_COMMAND__STRICT_BODIES).
        body = command_body_validator(body_type, strict=settings.command.strict_bodies)(args.body)
    except ValidationError as error:
        if any(item["type"] == "json_invalid" for item in error.errors()):
            raise SettingsError(f"the body is not well-formed JSON: {args.body!r}") from None
        listed = "; ".join(
            f"{v.path}: {v.message}" if v.path else v.message for v in validation_violations(error)
        )
        return _refused(f"the {args.command_name} body is invalid: {listed}")
    try:
        metadata, function = registry.function_for(body)
    except UnknownCommandError:
        return _refused(f"no aggregate of {args.transport} handles {args.command_name}")
    if metadata.named_aggregate != named:
        return _refused(f"{args.command_name} goes to {metadata.named_aggregate}, not {named}")
    if args.id is None and not function.create:
        return _refused(f"{args.command_name} is not a creation command: name its aggregate with --id")
    command = registry.command(
        body,
        args.id,
        request_id=args.request_id or "",
        header={OPERATOR_KEY: args.operator} if args.operator else None,
    )
    # A runtime of the service's body types only: it hosts no aggregate, so the command
    # goes out through the transport to the processes that do.
    client = WowApp(f"{service.name or 'wow'}-send", body_types=list(body_types.values()))
    runtime = client.runtime(settings, plugins=invocation.plugins)

    async def main() -> int:
        try:
            async with runtime:
                try:
                    result = await runtime.gateway.send_and_wait(command, plan, timeout=args.timeout)
                except (CommandValidationError, VoidCommandWaitError) as error:
                    return _refused(str(error))
                except CommandWaitTimeoutError as error:
                    print(f"wow send: {error}", file=sys.stderr)
                    return TIMED_OUT
                except Exception as error:
                    print(
                        f"wow send: the command could not be sent: {type(error).__name__}: {error}",
                        file=sys.stderr,
                    )
                    return UNAVAILABLE
        except StartError as error:
            print(f"wow send: the transport cannot be reached: {error}", file=sys.stderr)
            return UNAVAILABLE
        invocation.out.write(json.dumps(result_body(result).model_dump(mode="json"), indent=2) + "\n")
        return SUCCEEDED if result.succeeded or result.duplicate else REFUSED

    return asyncio.run(main())


def _command_types(app: Any) -> list[type[Any]]:
    from wow_core.modeling.aggregate import metadata_of

    return [cls for aggregate in app.aggregates for cls in metadata_of(aggregate).commands]


def _run_send(invocation: Any) -> int:
    if invocation.args.transport:
        return _send_transport(invocation)
    return _send_http(invocation)


COMMANDS: dict[str, Command] = {
    "openapi": Command(
        help="print the OpenAPI document of a service's HTTP API (module:app)",
        description="The OpenAPI 3 document of the routes `wow run` serves for module:app with "
        "WOW_HTTP__ENABLED=true: one route per command with its body schema, the queries, the errors.",
        run=_run_openapi,
        configure=_configure_openapi,
    ),
    "send": Command(
        help="send one command to a running service and print its result",
        description="Sends a command over HTTP (--url) or, with --transport module:app, over the configured "
        "transport, waits for --wait and prints the result. The body is checked by the service's rules "
        "(WOW_COMMAND__STRICT_BODIES). Exit status: 0 reached (or a duplicate); 1 refused (an invalid "
        "body, an unknown aggregate or command, a token refused, a business rule, a conflict); 2 usage "
        "error (wrong arguments, a body that is not JSON, a wrong module:app or setting); 3 the wait "
        "timed out; 4 the service or the transport could not be reached.",
        run=_run_send,
        configure=_configure_send,
    ),
}
