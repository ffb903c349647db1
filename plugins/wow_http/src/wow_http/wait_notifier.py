"""``HttpWaitNotifier``: wait signals between processes over HTTP.

For deployments whose processes reach each other over HTTP only: each process receives
the signals of the commands it waits for on its own HTTP server, at ``POST
<advertised URL>/wow/waits/<process id>`` (the endpoint ``http:<that URL>``); a process
that reaches a stage of a command waited for elsewhere posts the signal's JSON
(:func:`wow_core.spi.encode_signal`) to the URL named in the command's header.
``WOW_COMMAND__WAIT__NOTIFIER=http`` selects it; the process must serve HTTP
(``WOW_HTTP__ENABLED=true``) on a port the others reach: ``WOW_HTTP__ADVERTISED_URL``,
or ``http://<WOW_HTTP__HOST>:<WOW_HTTP__PORT><WOW_HTTP__ROOT_PATH>`` when the host is a
concrete address and the port is fixed.

Guaranteed: a signal posted while the caller serves reaches it at most once (no retry).
Not guaranteed: delivery to a caller that is down or unreachable (the post fails, is
logged and counted, and the wait ends at its deadline). Only URLs of the form
``http(s)://.../wow/waits/<32 hex digits>`` are posted to: an endpoint naming anything
else is refused, so a forged header cannot make a process call an arbitrary URL. When
``WOW_HTTP__AUTH__BEARER_TOKENS`` is set, the first token is sent with every post (the
processes of one service share their tokens) and the route requires one.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import httpx

from wow_core.command.endpoint import process_id
from wow_core.settings import SettingsError
from wow_core.spi import WaitEndpoint, WaitSignal, WaitSignalSink, encode_signal
from wow_http.settings import SECTION, HttpSettings

if TYPE_CHECKING:
    from wow_core.spi import ProcessSettings

KIND = "http"
WAIT_PATH = "/wow/waits"
_TARGET = re.compile(r"^https?://[^\s/]+(?:/[^\s]*)?/wow/waits/[0-9a-f]{32}$")

_receivers: dict[str, WaitSignalSink] = {}
"""The receiving halves of this process, by process id (what the wait route feeds)."""


def receiver(process: str) -> WaitSignalSink | None:
    """The sink of the notifier of this process that ``process`` names, if it is started."""
    return _receivers.get(process)


class HttpWaitNotifier:
    """The ``http`` :class:`~wow_core.spi.CommandWaitNotifier`; see the module doc."""

    kind = KIND

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 2.0) -> None:
        if not re.match(r"^https?://[^\s/]+", base_url):
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._process = ""
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> HttpWaitNotifier:
        """The notifier of ``WOW_HTTP__*``; :class:`~wow_core.settings.SettingsError` when
        this process serves no HTTP (nothing would receive its signals: every wait past
        ``SENT`` would end at its deadline) or has no URL the others can reach."""
        http = settings.section(SECTION, HttpSettings)
        if not http.enabled:
            raise SettingsError(
                "WOW_COMMAND__WAIT__NOTIFIER=http needs WOW_HTTP__ENABLED=true: the signals of the "
                "commands this process waits for are posted to its own HTTP server"
            )
        tokens = [token.get_secret_value() for token in http.auth.bearer_tokens]
        return cls(
            advertised_url(http), token=tokens[0] if tokens else None, timeout=http.wait_notify_timeout
        )

    async def start(self, sink: WaitSignalSink) -> WaitEndpoint:
        self._process = process_id()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        self._client = httpx.AsyncClient(timeout=self.timeout, headers=headers)
        _receivers[self._process] = sink
        return WaitEndpoint(KIND, f"{self.base_url}{WAIT_PATH}/{self._process}")

    async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        if endpoint.kind != KIND or not _TARGET.match(endpoint.address):
            raise ValueError(f"not an http wait endpoint: {str(endpoint)[:120]!r}")
        if self._client is None:
            raise RuntimeError("the http wait notifier is not started")
        response = await self._client.post(
            endpoint.address, content=encode_signal(signal), headers={"Content-Type": "application/json"}
        )
        if response.status_code >= 300:
            raise ConnectionError(f"{endpoint.address} answered {response.status_code}")

    async def close(self) -> None:
        _receivers.pop(self._process, None)
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def advertised_url(settings: HttpSettings) -> str:
    """The base URL other processes reach this one at (see the module doc)."""
    if settings.advertised_url:
        return settings.advertised_url.rstrip("/")
    if settings.port == 0 or settings.host in ("0.0.0.0", "::", ""):
        raise SettingsError(
            "the http wait notifier needs WOW_HTTP__ADVERTISED_URL, or a concrete WOW_HTTP__HOST and a "
            "fixed WOW_HTTP__PORT, for other processes to reach this one"
        )
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"http://{host}:{settings.port}{settings.root_path}"
