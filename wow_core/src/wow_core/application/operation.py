"""``Operation``: one execution of an application command in this process.

An operation carries its id (a fresh UUID unless given), the command, its attributes
(names are non-empty strings), its execution mode, when it was created here, and, once
done, its status and result. It is a runtime object of one process, never a wire
object: only its id and the allowlisted attributes cross an asynchronous boundary (see
:mod:`wow_core.application.envelope`). A worker that executes a queued command creates
a new operation; the producer's id reaches it as the attribute
``__original_operation_id``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

RESERVED_PREFIX = "__"
"""Attribute names starting with it are trusted runtime state: no queued data sets them."""


class ExecutionMode(StrEnum):
    DEFAULT = "default"
    """Follow the command's marker: an asynchronous command is queued by the transport middleware."""
    SYNC = "sync"
    """Execute here, now: the transport middleware passes the command through (a worker's re-dispatch)."""


class OperationStatus(StrEnum):
    PENDING = "pending"
    """Created, not finished."""
    QUEUED = "queued"
    """Handed to a transport (``Operation.transport`` names which); a worker executes it later."""
    COMPLETED = "completed"
    """The handler returned; ``Operation.result`` is what it returned."""
    FAILED = "failed"
    """The pipeline raised."""


def check_attribute_names(attributes: Mapping[str, Any], where: str = "operation attributes") -> None:
    """Attribute names are non-empty strings; raises ``TypeError``/``ValueError``."""
    for name in attributes:
        if type(name) is not str:
            raise TypeError(f"{where}: the name {name!r} is a {type(name).__name__}, not a string")
        if not name:
            raise ValueError(f"{where}: an attribute name cannot be empty")


class Operation:
    """One execution of ``command`` (see the module docstring)."""

    __slots__ = (
        "attributes",
        "command",
        "created_at",
        "execution_mode",
        "operation_id",
        "result",
        "status",
        "transport",
    )

    def __init__(
        self,
        command: object,
        *,
        operation_id: str | None = None,
        attributes: Mapping[str, Any] | None = None,
        execution_mode: ExecutionMode = ExecutionMode.DEFAULT,
        created_at: float | None = None,
    ) -> None:
        if operation_id is not None and (type(operation_id) is not str or not operation_id):
            raise ValueError(f"an operation id is a non-empty string, not {operation_id!r}")
        copied = dict(attributes or {})
        check_attribute_names(copied)
        self.command = command
        self.operation_id: str = operation_id or str(uuid.uuid4())
        self.attributes: dict[str, Any] = copied
        self.execution_mode = ExecutionMode(execution_mode)
        self.created_at: float = time.time() if created_at is None else created_at
        self.result: Any = None
        self.status = OperationStatus.PENDING
        self.transport: str | None = None

    def complete(self, result: Any) -> None:
        self.result = result
        self.status = OperationStatus.COMPLETED

    def fail(self) -> None:
        self.status = OperationStatus.FAILED

    def queued(self, transport_name: str) -> None:
        self.transport = transport_name
        self.status = OperationStatus.QUEUED

    def __repr__(self) -> str:
        return (
            f"Operation({type(self.command).__qualname__}, id={self.operation_id}, "
            f"mode={self.execution_mode.value}, status={self.status.value})"
        )
