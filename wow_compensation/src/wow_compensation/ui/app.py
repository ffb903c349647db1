"""The operations page as an ASGI app: :func:`create_app`.

Server-rendered HTML (no external resource, it works offline) with a little JavaScript
for the live refresh. Mount it into any ASGI app (``Mount("/compensation", app)``): its
links are relative to where it is mounted (the ``root_path``).

Reading needs nothing. Writing (prepare, force prepare, apply a retry spec, mark
recoverable, change the function) needs the operator token
(``WOW_COMPENSATION__UI__TOKEN``): the operator signs in with it (a session cookie,
``HttpOnly`` and ``SameSite=Strict``, derived from the token; every form carries a CSRF
field derived from it too), or a script sends ``Authorization: Bearer <token>``. Without a
configured token the page is read-only and every write is refused (403).

Every action names the record version the operator saw (``expected_version``); the
command carries it to the record's aggregate, so an action on a record that moved on
meanwhile is refused (409) and changes nothing, like an action the state does not allow
(prepare on SUCCEEDED) or an unknown id (404). A malformed action (unknown action, a
field that is not a number...) is refused with 400. A refusal is a page saying why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from wow_compensation.model import (
    ApplyRetrySpec,
    ChangeFunction,
    ExecutionFailedStatus,
    ForcePrepareCompensation,
    FunctionInfo,
    FunctionKindName,
    MarkRecoverable,
    PrepareCompensation,
    Recoverable,
    RetrySpec,
)
from wow_compensation.service import ActionRefused, CompensationCommands, UnknownExecutionError
from wow_compensation.store import CompensationStore, ExecutionRecord, Queue, RecordQuery, now_ms, query

History = Callable[[str], Awaitable[list[Any]]]
"""The event streams of one record, oldest first (from the event store)."""

SESSION_COOKIE = "wow_compensation_session"

QUEUE_TITLES: dict[Queue, str] = {
    Queue.TO_RETRY: "To retry",
    Queue.EXECUTING: "Executing",
    Queue.NEXT_RETRY: "Next retry",
    Queue.NON_RETRYABLE: "Non retryable",
    Queue.SUCCEEDED: "Succeeded",
    Queue.UNRECOVERABLE: "Unrecoverable",
}

FILTERS: dict[str, str] = {
    "id": "Execution id",
    "event_id": "Event id",
    "aggregate_id": "Aggregate id",
    "aggregate": "Aggregate (context.name)",
    "processor": "Processor",
    "function": "Function",
}

ACTIONS = ("prepare", "force-prepare", "apply-retry-spec", "mark-recoverable", "change-function")

_STATIC = files("wow_compensation.ui") / "static"
_ASSETS: dict[str, tuple[str, str]] = {
    "page.css": ("text/css; charset=utf-8", (_STATIC / "page.css").read_text(encoding="utf-8")),
    "page.js": ("text/javascript; charset=utf-8", (_STATIC / "page.js").read_text(encoding="utf-8")),
}
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass
class Operations:
    """What the page reads and writes: the read model, the records' commands (None: the
    page is read-only whatever the token) and the records' history."""

    store: CompensationStore
    commands: CompensationCommands | None = None
    history: History | None = None


Form = dict[str, str]
MAX_FORM = 16_384
"""Bytes of a form at most (the page's forms are a few hundred)."""


async def _form(request: Request) -> Form:
    """The request's urlencoded form (the only kind the page sends), bounded in size."""
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/x-www-form-urlencoded":
        raise Refusal(415, "Malformed action", "Send the form as application/x-www-form-urlencoded.")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise Refusal(413, "Malformed action", f"The form is larger than {MAX_FORM} bytes.")
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False))
    except UnicodeDecodeError:
        raise Refusal(400, "Malformed action", "The form is not UTF-8.") from None


class Refusal(Exception):
    """An action or a request refused: ``status`` is the HTTP status, nothing changed."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message


def _derived(token: str, purpose: str) -> str:
    return hmac.new(token.encode(), f"wow-compensation:{purpose}".encode(), hashlib.sha256).hexdigest()


def _time(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _e(value: object) -> str:
    return escape(str(value), quote=True)


class _Page:
    """The request's view of the app: where it is mounted, who is signed in."""

    def __init__(self, request: Request, token: str | None, refresh: float) -> None:
        self.request = request
        self.token = token
        self.refresh = refresh
        self.base = str(request.scope.get("root_path", "")).rstrip("/")

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    @property
    def writable(self) -> bool:
        return self.token is not None

    @property
    def signed_in(self) -> bool:
        token = self.token
        if token is None:
            return False
        auth = self.request.headers.get("authorization", "")
        if auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].encode(), token.encode()):
            return True
        cookie = self.request.cookies.get(SESSION_COOKIE, "")
        return hmac.compare_digest(cookie.encode(), _derived(token, "session").encode())

    @property
    def bearer(self) -> bool:
        return self.request.headers.get("authorization", "").startswith("Bearer ")

    @property
    def csrf(self) -> str:
        return _derived(self.token, "csrf") if self.token else ""

    def document(self, title: str, body: str, status: int = 200) -> HTMLResponse:
        header = self._header()
        html = (
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)} - event compensation</title>"
            f'<link rel="stylesheet" href="{self.url("/static/page.css")}">'
            f'<script defer src="{self.url("/static/page.js")}"></script>'
            f'</head><body data-refresh="{self.refresh:g}">{header}<main>{body}</main></body></html>'
        )
        return HTMLResponse(html, status_code=status, headers=_SECURITY_HEADERS)

    def _header(self) -> str:
        if not self.writable:
            who = '<p class="muted">Read-only: no operator token is configured.</p>'
        elif self.signed_in:
            who = (
                f'<form method="post" action="{self.url("/logout")}">'
                f'<input type="hidden" name="csrf" value="{self.csrf}">'
                '<span class="muted">Signed in as operator </span>'
                '<button type="submit" class="secondary">Sign out</button></form>'
            )
        else:
            here = _e(
                self.request.url.path + (f"?{self.request.url.query}" if self.request.url.query else "")
            )
            who = (
                f'<form method="post" action="{self.url("/login")}" aria-label="Sign in">'
                f'<input type="hidden" name="next" value="{here}">'
                '<label for="token">Operator token</label> '
                '<input type="password" id="token" name="token" autocomplete="current-password" required> '
                '<button type="submit">Sign in</button></form>'
            )
        return (
            '<header class="top"><h1><a href="'
            + self.url("/")
            + '">Event compensation</a></h1>'
            + '<p id="refreshed" class="muted" aria-live="off">live</p>'
            + who
            + "</header>"
        )


def create_app(
    operations: Operations,
    *,
    token: str | None = None,
    refresh: float = 2.0,
) -> Starlette:
    """The operations page over ``operations``; ``token`` enables the actions."""
    if token is not None and len(token) < 16:
        raise ValueError("the operator token must have at least 16 characters")
    if refresh <= 0:
        raise ValueError("refresh must be > 0 seconds")

    def page_of(request: Request) -> _Page:
        return _Page(request, token, refresh)

    async def index(request: Request) -> Response:
        page = page_of(request)
        try:
            q = _query(request.query_params)
        except Refusal as refusal:
            return _refused(page, refusal)
        result = await query(operations.store, q)
        live = _list(page, q, result.items, result.total, result.counts)
        if request.query_params.get("partial") == "1":
            return HTMLResponse(live, headers=_SECURITY_HEADERS)
        body = _filters(page, q) + f'<div id="live">{live}</div>'
        return page.document("Records", body)

    async def detail(request: Request) -> Response:
        page = page_of(request)
        record_id = request.path_params["record_id"]
        record = await operations.store.get(record_id)
        if record is None:
            return _refused(
                page, Refusal(404, "Unknown execution", f"No execution failure has the id {record_id}.")
            )
        history = await operations.history(record_id) if operations.history is not None else []
        live = _detail(record, history)
        if request.query_params.get("partial") == "1":
            return HTMLResponse(live, headers=_SECURITY_HEADERS)
        done = request.query_params.get("done", "")
        notice = (
            f'<p class="notice done" role="status">Done: {_e(done)} (version {record.version}).</p>'
            if done in ACTIONS
            else ""
        )
        body = (
            f'<p><a href="{page.url("/")}">All records</a></p>{notice}'
            f'<div id="live">{live}</div>{_actions(page, record)}'
        )
        return page.document(f"Execution {record_id}", body)

    async def act(request: Request) -> Response:
        page = page_of(request)
        record_id = request.path_params["record_id"]
        action = request.path_params["action"]
        try:
            return await _act(page, operations, record_id, action, await _form(request))
        except Refusal as refusal:
            return _refused(page, refusal)

    async def login(request: Request) -> Response:
        page = page_of(request)
        try:
            form = await _form(request)
        except Refusal as refusal:
            return _refused(page, refusal)
        given = str(form.get("token", ""))
        target = str(form.get("next", "/"))
        if not target.startswith("/") or target.startswith("//"):
            target = page.url("/")
        if token is None:
            return _refused(page, Refusal(403, "Read-only", "No operator token is configured: read-only."))
        if not hmac.compare_digest(given.encode(), token.encode()):
            return _refused(page, Refusal(401, "Wrong token", "That is not the operator token."))
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            _derived(token, "session"),
            httponly=True,
            samesite="strict",
            path=page.url("/") or "/",
        )
        return response

    async def logout(request: Request) -> Response:
        page = page_of(request)
        response = RedirectResponse(page.url("/"), status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=page.url("/") or "/")
        return response

    async def api_records(request: Request) -> Response:
        try:
            q = _query(request.query_params)
        except Refusal as refusal:
            return JSONResponse({"error": refusal.message}, status_code=refusal.status)
        from wow_compensation.cli import record_json

        now = now_ms()
        result = await query(operations.store, q, now)
        return JSONResponse(
            {
                "total": result.total,
                "counts": {queue.value: count for queue, count in result.counts.items()},
                "items": [record_json(record, now) for record in result.items],
            }
        )

    async def api_record(request: Request) -> Response:
        from wow_compensation.cli import record_json

        record = await operations.store.get(request.path_params["record_id"])
        if record is None:
            return JSONResponse({"error": "no execution failure has this id"}, status_code=404)
        return JSONResponse(record_json(record, now_ms()))

    async def asset(request: Request) -> Response:
        found = _ASSETS.get(request.path_params["name"])
        if found is None:
            return Response("not found", status_code=404, media_type="text/plain")
        media_type, text = found
        return Response(text, media_type=media_type, headers={"X-Content-Type-Options": "nosniff"})

    return Starlette(
        routes=[
            Route("/", index),
            Route("/records/{record_id}", detail),
            Route("/records/{record_id}/actions/{action}", act, methods=["POST"]),
            Route("/login", login, methods=["POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/api/records", api_records),
            Route("/api/records/{record_id}", api_record),
            Route("/static/{name}", asset),
        ]
    )


# -- reading ------------------------------------------------------------------------------


def _query(params: Mapping[str, str]) -> RecordQuery:
    values: dict[str, Any] = {name: params[name].strip() for name in FILTERS if params.get(name, "").strip()}
    queue = params.get("queue", "")
    if queue:
        try:
            values["queue"] = Queue(queue)
        except ValueError:
            raise Refusal(400, "Bad filter", f"Unknown queue {queue!r}.") from None
    status = params.get("status", "")
    if status:
        try:
            values["status"] = ExecutionFailedStatus(status)
        except ValueError:
            raise Refusal(400, "Bad filter", f"Unknown status {status!r}.") from None
    for name, low, high in (("offset", 0, 1 << 31), ("limit", 1, 1000)):
        if params.get(name):
            values[name] = _int(params[name], name, low, high)
    return RecordQuery(**values)


def _link(page: _Page, q: RecordQuery, **changes: Any) -> str:
    fields = {name: getattr(q, name) for name in (*FILTERS, "queue", "status", "offset")}
    fields.update(changes)
    params = "&".join(
        f"{name}={escape(str(value.value if hasattr(value, 'value') else value))}"
        for name, value in fields.items()
        if value not in (None, "", 0)
    )
    return page.url("/") + (f"?{params}" if params else "")


def _filters(page: _Page, q: RecordQuery) -> str:
    inputs = "".join(
        f'<div><label for="f-{name}">{_e(label)}</label>'
        f'<input type="text" id="f-{name}" name="{name}" value="{_e(getattr(q, name) or "")}"></div>'
        for name, label in FILTERS.items()
    )
    queue = f'<input type="hidden" name="queue" value="{q.queue.value}">' if q.queue else ""
    return (
        f'<form class="filters" role="search" method="get" action="{page.url("/")}" '
        'aria-label="Filter the records (exact match)">'
        f'{inputs}{queue}<div><button type="submit">Filter</button> '
        f'<a href="{page.url("/")}">Clear</a></div></form>'
    )


def _list(
    page: _Page,
    q: RecordQuery,
    items: tuple[ExecutionRecord, ...],
    total: int,
    counts: Mapping[Queue, int],
) -> str:
    now = now_ms()
    tabs = []
    for queue, title in QUEUE_TITLES.items():
        current = ' aria-current="page"' if q.queue is queue else ""
        tabs.append(
            f'<li><a href="{_link(page, q, queue=queue, offset=0)}"{current} data-queue="{queue.value}">'
            f'{_e(title)}<span class="count">{counts.get(queue, 0)}</span></a></li>'
        )
    every = ' aria-current="page"' if q.queue is None else ""
    tabs.insert(
        0,
        f'<li><a href="{_link(page, q, queue=None, offset=0)}"{every}>All'
        f'<span class="count">{sum(counts.values())}</span></a></li>',
    )
    nav = f'<nav class="queues" aria-label="Queues"><ul>{"".join(tabs)}</ul></nav>'
    if not items:
        return nav + '<p id="records-empty">No record matches.</p>'
    rows = []
    for record in items:
        state = record.state
        event, function, error = state.event, state.function, state.error
        next_at = record.due_at()
        rows.append(
            f'<tr data-record="{_e(state.id)}">'
            f'<td><a href="{page.url("/records/" + state.id)}">{_e(state.id[:12])}</a></td>'
            f'<td class="status-{state.status.value}">{state.status.value}</td>'
            f"<td>{_e(QUEUE_TITLES[record.queue(now)])}</td>"
            f"<td>{state.recoverable.value}</td>"
            f"<td>{state.retry_state.retries}/{state.retry_spec.max_retries}</td>"
            f"<td>{_e(_time(next_at) if next_at is not None else '-')}</td>"
            f"<td>{_e(function.qualified_name if function else '')}</td>"
            f"<td>{_e(f'{event.aggregate}:{event.aggregate_id}@{event.version}' if event else '')}</td>"
            f'<td class="error">{_e(f"{error.error_type}: {error.message}"[:160] if error else "")}</td>'
            "</tr>"
        )
    shown_to = q.offset + len(items)
    pager = f'<p class="muted">{q.offset + 1}-{shown_to} of {total}'
    if q.offset > 0:
        pager += f' <a href="{_link(page, q, offset=max(0, q.offset - q.limit))}">previous</a>'
    if shown_to < total:
        pager += f' <a href="{_link(page, q, offset=shown_to)}">next</a>'
    pager += "</p>"
    head = "".join(
        f'<th scope="col">{name}</th>'
        for name in (
            "Execution",
            "Status",
            "Queue",
            "Recoverable",
            "Retries",
            "Next retry",
            "Function",
            "Event",
            "Error",
        )
    )
    return (
        f"{nav}<table><caption>Execution failures, newest first</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{pager}"
    )


def _facts(items: list[tuple[str, object]]) -> str:
    return (
        '<dl class="facts">'
        + "".join(f"<dt>{_e(name)}</dt><dd>{_e(value)}</dd>" for name, value in items)
        + "</dl>"
    )


MAX_BODY = 1_000
"""Characters of an event body the history shows."""


def _body_json(body: object) -> str:
    """An event body as JSON, its stack trace left out (the Error section shows it)."""
    if dataclasses.is_dataclass(body) and not isinstance(body, type):
        data: object = dataclasses.asdict(body)
    else:
        data = body
    if isinstance(data, dict) and isinstance(data.get("error"), dict) and data["error"].get("stack_trace"):
        data["error"]["stack_trace"] = "(see Error)"
    text = json.dumps(data, default=str, sort_keys=True)
    return text if len(text) <= MAX_BODY else text[: MAX_BODY - 1] + "\u2026"


def _detail(record: ExecutionRecord, history: list[Any]) -> str:
    state = record.state
    event, function, error = state.event, state.function, state.error
    spec, retry = state.retry_spec, state.retry_state
    now = now_ms()
    summary = _facts(
        [
            ("Execution id", state.id),
            ("Status", state.status.value),
            ("Queue", QUEUE_TITLES[record.queue(now)]),
            ("Recoverable", state.recoverable.value),
            ("Version", record.version),
            ("Failed at", _time(state.execute_at)),
        ]
    )
    event_facts = _facts(
        [
            ("Aggregate", event.aggregate),
            ("Aggregate id", event.aggregate_id),
            ("Tenant", event.tenant_id),
            ("Version", event.version),
            ("Event id", event.event_id),
            ("Event", event.event_name),
        ]
        if event
        else []
    )
    function_facts = _facts(
        [
            ("Context", function.context_name),
            ("Processor", function.processor_name),
            ("Function", function.function_name),
            ("Kind", function.function_kind.value),
        ]
        if function
        else []
    )
    retry_facts = _facts(
        [
            ("Enabled", spec.enabled),
            ("Max retries", spec.max_retries),
            ("Min backoff (s)", f"{spec.min_backoff:g}"),
            ("Max backoff (s)", f"{spec.max_backoff:g}"),
            ("Execution timeout (s)", f"{spec.execution_timeout:g}"),
            ("Retries", retry.retries),
            ("Last retry at", _time(retry.retry_at)),
            ("Times out at", _time(retry.timeout_at)),
            ("Next retry at", _time(retry.next_retry_at)),
        ]
    )
    error_html = (
        f'<p id="error-message"><strong>{_e(error.error_type)}</strong>: {_e(error.message)}</p>'
        + (
            "<details open><summary>Stack trace</summary>"
            f'<pre tabindex="0">{_e(error.stack_trace)}</pre></details>'
            if error.stack_trace
            else ""
        )
        if error
        else "<p>No error.</p>"
    )
    rows = "".join(
        f"<tr><td>{stream.version}</td><td>{_e(item.name)}</td><td>{_e(_time(stream.create_time))}</td>"
        f"<td><code>{_e(_body_json(item.body))}</code></td></tr>"
        for stream in history
        for item in stream.events
    )
    history_html = (
        "<table><caption>The record's events, oldest first</caption><thead><tr>"
        '<th scope="col">Version</th><th scope="col">Event</th><th scope="col">At</th>'
        f'<th scope="col">Body</th></tr></thead><tbody>{rows}</tbody></table>'
        if rows
        else "<p>No history available.</p>"
    )
    return (
        f'<section aria-labelledby="h-summary" data-version="{record.version}" '
        f'data-status="{state.status.value}">'
        f'<h2 id="h-summary">Execution <span class="status-{state.status.value}" id="status">'
        f"{state.status.value}</span></h2>{summary}</section>"
        f'<section aria-labelledby="h-error"><h2 id="h-error">Error</h2>{error_html}</section>'
        '<div class="grid2">'
        f'<section aria-labelledby="h-event"><h2 id="h-event">Event</h2>{event_facts}</section>'
        f'<section aria-labelledby="h-function"><h2 id="h-function">Function</h2>{function_facts}</section>'
        '<section aria-labelledby="h-retry"><h2 id="h-retry">Retry spec and state</h2>'
        f"{retry_facts}</section>"
        "</div>"
        f'<section aria-labelledby="h-history"><h2 id="h-history">History</h2>{history_html}</section>'
    )


# -- writing ------------------------------------------------------------------------------


def _actions(page: _Page, record: ExecutionRecord) -> str:
    if not page.writable:
        return '<p class="muted">Actions need an operator token (WOW_COMPENSATION__UI__TOKEN).</p>'
    if not page.signed_in:
        return '<p class="muted">Sign in with the operator token to act on this record.</p>'
    state = record.state

    def form(action: str, title: str, fields: str, button: str, css: str = "") -> str:
        return (
            f'<form method="post" action="{page.url(f"/records/{state.id}/actions/{action}")}" '
            f'aria-labelledby="a-{action}"><h3 id="a-{action}">{_e(title)}</h3>'
            f'<input type="hidden" name="csrf" value="{page.csrf}">'
            f'<input type="hidden" name="expected_version" value="{record.version}">{fields}'
            f'<button type="submit" name="submit" value="{action}"{css}>{_e(button)}</button></form>'
        )

    spec = state.retry_spec
    function = state.function
    recoverable = "".join(
        f'<option value="{r.value}"{" selected" if r is state.recoverable else ""}>{r.value}</option>'
        for r in Recoverable
    )
    kinds = "".join(
        f'<option value="{k.value}"{" selected" if function and k is function.function_kind else ""}>'
        f"{k.value}</option>"
        for k in FunctionKindName
    )

    def number(name: str, label: str, value: object, step: str = "any") -> str:
        return (
            f'<label for="{name}">{_e(label)}</label>'
            f'<input type="number" id="{name}" name="{name}" value="{_e(value)}" min="0" '
            f'step="{step}" required>'
        )

    def text(name: str, label: str, value: str) -> str:
        return (
            f'<label for="{name}">{_e(label)}</label>'
            f'<input type="text" id="{name}" name="{name}" value="{_e(value)}" required>'
        )

    enabled = " checked" if spec.enabled else ""
    return (
        '<section class="actions" aria-labelledby="h-actions"><h2 id="h-actions" class="visually-hidden">'
        "Actions</h2>"
        + form("prepare", "Retry", '<p class="muted">Prepare a compensation within the rules.</p>', "Retry")
        + form(
            "force-prepare",
            "Force retry",
            '<p class="muted">Past the retry cap and whatever the recoverability.</p>'
            '<p class="check"><input type="checkbox" id="confirm-force" name="confirm" value="yes" required> '
            '<label for="confirm-force">I want to force this retry</label></p>',
            "Force retry...",
            ' class="danger"',
        )
        + form(
            "apply-retry-spec",
            "Retry spec",
            number("max_retries", "Max retries", spec.max_retries, "1")
            + number("min_backoff", "Min backoff (s)", f"{spec.min_backoff:g}")
            + number("max_backoff", "Max backoff (s)", f"{spec.max_backoff:g}")
            + number("execution_timeout", "Execution timeout (s)", f"{spec.execution_timeout:g}")
            + '<input type="hidden" name="enabled" value="no">'
            + f'<p class="check"><input type="checkbox" id="enabled" name="enabled" value="yes"{enabled}> '
            '<label for="enabled">Enabled</label></p>',
            "Apply retry spec",
        )
        + form(
            "mark-recoverable",
            "Recoverability",
            f'<label for="recoverable">Recoverable</label><select id="recoverable" name="recoverable">'
            f"{recoverable}</select>",
            "Mark",
        )
        + form(
            "change-function",
            "Function",
            text("context", "Context", function.context_name if function else "")
            + text("processor", "Processor", function.processor_name if function else "")
            + text("function", "Function", function.function_name if function else "")
            + f'<label for="kind">Kind</label><select id="kind" name="kind">{kinds}</select>',
            "Change function",
        )
        + "</section>"
    )


def _int(text: str, name: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise Refusal(400, "Malformed action", f"{name} must be a whole number, got {text!r}.") from None
    if not low <= value <= high:
        raise Refusal(400, "Malformed action", f"{name} must be in {low}..{high}, got {value}.")
    return value


def _float(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise Refusal(400, "Malformed action", f"{name} must be a number of seconds, got {text!r}.") from None
    if not 0 <= value <= 86_400 * 365:
        raise Refusal(400, "Malformed action", f"{name} must be in 0..{86_400 * 365} seconds, got {value}.")
    return value


SPEC_SECONDS = ("min_backoff", "max_backoff", "execution_timeout")


def _retry_spec(current: RetrySpec, form: Form) -> RetrySpec:
    """``current`` with the fields the form gives changed, as ``wow compensation
    apply-retry-spec`` does: a field that is missing or blank keeps its value; ``enabled``
    is ``yes`` or ``no`` (the page's checkbox sends ``no``, then ``yes`` when ticked)."""
    changes: dict[str, Any] = {}
    given = {name: str(value).strip() for name, value in form.items()}
    if given.get("max_retries"):
        changes["max_retries"] = _int(given["max_retries"], "max_retries", 0, 1000)
    for name in SPEC_SECONDS:
        if given.get(name):
            changes[name] = _float(given[name], name)
    enabled = given.get("enabled")
    if enabled:
        if enabled not in ("yes", "no"):
            raise Refusal(400, "Malformed action", f"enabled must be yes or no, got {enabled[:20]!r}.")
        changes["enabled"] = enabled == "yes"
    try:
        return dataclasses.replace(current, **changes)
    except ValueError as invalid:
        raise Refusal(400, "Malformed action", f"{invalid}.") from None


def _text(form: Form, name: str) -> str:
    value = str(form.get(name, "")).strip()
    if not value or len(value) > 200:
        raise Refusal(400, "Malformed action", f"{name} must be 1 to 200 characters.")
    return value


async def _act(page: _Page, operations: Operations, record_id: str, action: str, form: Form) -> Response:
    if not page.writable or operations.commands is None:
        raise Refusal(403, "Read-only", "This page is read-only: no operator token is configured.")
    if not page.signed_in:
        raise Refusal(401, "Not signed in", "Sign in with the operator token to act on a record.")
    if not page.bearer and not hmac.compare_digest(str(form.get("csrf", "")).encode(), page.csrf.encode()):
        raise Refusal(403, "Refused", "The form is not this page's (its CSRF field does not match).")
    if action not in ACTIONS:
        raise Refusal(400, "Malformed action", f"Unknown action {action!r}; one of {', '.join(ACTIONS)}.")
    expected = _int(str(form.get("expected_version", "")), "expected_version", 1, 1 << 31)
    record = await operations.store.get(record_id)
    if record is None:
        raise Refusal(404, "Unknown execution", f"No execution failure has the id {record_id}.")
    if record.version != expected:
        raise Refusal(
            409,
            "Stale",
            f"The record changed since the page showed it (version {record.version}, the page showed "
            f"{expected}): nothing was done. Reload and look again.",
        )
    body: object
    if action == "prepare":
        body = PrepareCompensation(now_ms())
    elif action == "force-prepare":
        if form.get("confirm") != "yes":
            raise Refusal(400, "Not confirmed", "A force retry must be confirmed: tick the box first.")
        if form.get("confirmed") != "yes":
            return _confirm_force(page, record)
        body = ForcePrepareCompensation(now_ms())
    elif action == "apply-retry-spec":
        body = ApplyRetrySpec(_retry_spec(record.state.retry_spec, form))
    elif action == "mark-recoverable":
        try:
            body = MarkRecoverable(Recoverable(str(form.get("recoverable", ""))))
        except ValueError:
            raise Refusal(
                400, "Malformed action", "recoverable must be RECOVERABLE, UNKNOWN or UNRECOVERABLE."
            ) from None
    else:
        try:
            kind = FunctionKindName(str(form.get("kind", "")))
        except ValueError:
            raise Refusal(400, "Malformed action", "kind must be EVENT or STATE_EVENT.") from None
        body = ChangeFunction(
            FunctionInfo(_text(form, "context"), _text(form, "processor"), _text(form, "function"), kind)
        )
    try:
        await operations.commands.send(body, record_id, expected_version=expected)
    except UnknownExecutionError as unknown:
        raise Refusal(404, "Unknown execution", unknown.message) from None
    except ActionRefused as refused:
        raise Refusal(
            409, "Refused", f"{refused.code}: {refused.message or 'refused'}. Nothing changed."
        ) from None
    return RedirectResponse(page.url(f"/records/{record_id}?done={action}"), status_code=303)


def _confirm_force(page: _Page, record: ExecutionRecord) -> Response:
    state = record.state
    body = (
        f"<h2>Force retry of {_e(state.id)}?</h2>"
        f"<p>It has been retried {state.retry_state.retries} times (the cap is "
        f"{state.retry_spec.max_retries}) and is {state.recoverable.value}. A force retry runs it again "
        "regardless.</p>"
        f'<form method="post" action="{page.url(f"/records/{state.id}/actions/force-prepare")}">'
        f'<input type="hidden" name="csrf" value="{page.csrf}">'
        f'<input type="hidden" name="expected_version" value="{record.version}">'
        '<input type="hidden" name="confirm" value="yes"><input type="hidden" name="confirmed" value="yes">'
        '<button type="submit" class="danger">Yes, force the retry</button> '
        f'<a href="{page.url("/records/" + state.id)}">Cancel</a></form>'
    )
    return page.document("Confirm force retry", body)


def _refused(page: _Page, refusal: Refusal) -> Response:
    body = (
        f'<p class="notice refused" role="alert"><strong>{_e(refusal.title)}.</strong> '
        f"{_e(refusal.message)}</p>"
        f'<p><a href="{page.url("/")}">All records</a></p>'
    )
    return page.document(refusal.title, body, refusal.status)
