"""``HttpSettings``: the ``http`` settings section, read from ``WOW_HTTP__*``.

``WOW_HTTP__ENABLED=true`` makes ``wow run`` serve the service over HTTP on
``WOW_HTTP__HOST``:``WOW_HTTP__PORT`` (loopback, 8080 by default). Every value is
bounded: a body limit of at most 64 MiB, a wait timeout of at most a day, text at most
4096 characters, at most 64 CORS origins, methods and headers each.

Bearer tokens (``WOW_HTTP__AUTH__BEARER_TOKENS``, a comma-separated list or a JSON
array) are secrets: they never appear in a ``repr``, a log line or ``wow settings``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from wow_core.settings import Seconds, SettingsSection

SECTION = "http"
MAX_BODY_LIMIT = 64 * 1024 * 1024
"""The largest request body limit ``WOW_HTTP__MAX_BODY_BYTES`` accepts (64 MiB)."""
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


def _split(value: Any) -> Any:
    """A comma-separated list or a JSON array, from the environment."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


class CorsSettings(SettingsSection):
    """``WOW_HTTP__CORS__*``: Cross-Origin Resource Sharing; off while no origin is allowed."""

    allow_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        max_length=64,
        description="Origins allowed to call from a browser ('*' for any); empty: CORS is off.",
    )
    allow_methods: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["GET", "POST"], max_length=64, description="Methods allowed."
    )
    allow_headers: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["*"], max_length=64, description="Request headers allowed."
    )
    allow_credentials: bool = Field(False, description="Whether cookies and credentials are allowed.")
    max_age: int = Field(600, ge=0, le=86_400, description="Seconds a browser caches a preflight answer.")

    _split_lists = field_validator("allow_origins", "allow_methods", "allow_headers", mode="before")(
        lambda cls, value: _split(value)
    )


class AuthSettings(SettingsSection):
    """``WOW_HTTP__AUTH__*``: the built-in bearer-token check (an app may install its own)."""

    bearer_tokens: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        max_length=64,
        description="Tokens accepted in 'Authorization: Bearer <token>'; empty: no built-in check.",
    )

    _split_tokens = field_validator("bearer_tokens", mode="before")(lambda cls, value: _split(value))


class HttpSettings(SettingsSection):
    """How ``wow run`` serves HTTP, and the limits of every request."""

    enabled: bool = Field(False, description="Serve HTTP from `wow run`.")
    host: str = Field("127.0.0.1", min_length=1, max_length=255, description="Address to bind.")
    port: int = Field(8080, ge=0, le=65_535, description="Port to bind (0: any free port).")
    root_path: str = Field(
        "", max_length=1024, description="Path prefix under which a proxy serves this app ('/api')."
    )
    max_body_bytes: int = Field(
        1024 * 1024, gt=0, le=MAX_BODY_LIMIT, description="Largest request body accepted, in bytes."
    )
    max_wait_timeout: Seconds = Field(
        300.0, description="Longest Wow-Wait-Timeout a request may ask for, in seconds."
    )
    shutdown_timeout: Seconds = Field(
        10.0, description="Seconds in-flight requests may take to finish when the server stops."
    )
    advertised_url: str | None = Field(
        None,
        max_length=1024,
        description="The base URL other processes reach this one at, for the http wait notifier "
        "(default: http://<host>:<port><root_path>).",
    )
    wait_notify_timeout: Seconds = Field(2.0, description="Seconds one wait signal post may take.")
    cors: CorsSettings = Field(default_factory=CorsSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)

    @field_validator("root_path")
    @classmethod
    def _root_path(cls, value: str) -> str:
        if value and (not value.startswith("/") or value.endswith("/")):
            raise ValueError("a root path starts with '/' and does not end with one ('/api')")
        return value

    @field_validator("advertised_url")
    @classmethod
    def _advertised_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("an advertised URL starts with http:// or https://")
        return value

    @property
    def loopback(self) -> bool:
        """Whether ``host`` is a loopback address (only this machine can connect)."""
        return self.host in LOOPBACK or self.host.startswith("127.")
