"""The wait endpoint: where the signals of a waited-for command must go.

For a plan past ``SENT`` the gateway writes the *wait context* into the command's header
(:func:`write_wait_context`); the kernel copies the header onto the command's event
stream, so every process that reaches a stage of that command finds it there:

=============================  ===============================================
``command_wait_endpoint``      ``<kind>:<address>``: the notifier kind that reaches the
                               waiting process (``redis``, ``nats``, ``kafka``,
                               ``in_memory``) and that process's address for it (a
                               Redis channel, a NATS subject, a Kafka topic and key)
``command_wait_stage``         the stage waited for (``PROCESSED``, ``PROJECTED``...)
``command_wait_context``       the plan's context name, when it names one
``command_wait_processor``     the plan's processor name, when it names one
``command_wait_function``      the plan's function name, when it names one
=============================  ===============================================

An endpoint names one process (the address carries a random process id) and stays the
same for the life of that process. A plan for ``SENT`` writes nothing: ``SENT`` is
decided by the sender itself.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from wow_core.command.stages import CommandStage, WaitPlan, WaitSignal

WAIT_ENDPOINT = "command_wait_endpoint"
WAIT_STAGE = "command_wait_stage"
WAIT_CONTEXT = "command_wait_context"
WAIT_PROCESSOR = "command_wait_processor"
WAIT_FUNCTION = "command_wait_function"

MAX_ENDPOINT = 1024
"""Longest endpoint accepted from a header (a longer one is not followed)."""


class InvalidWaitEndpointError(ValueError):
    """A header's ``command_wait_endpoint`` is not ``<kind>:<address>``."""


@dataclass(frozen=True, slots=True)
class WaitEndpoint:
    """Where one process receives wait signals: a notifier ``kind`` and an ``address``
    that the notifier of that kind understands. ``str()`` is the header form."""

    kind: str
    address: str

    def __post_init__(self) -> None:
        if not self.kind or ":" in self.kind or not self.address:
            raise InvalidWaitEndpointError(
                f"not a wait endpoint: kind {self.kind!r}, address {self.address!r}"
            )

    def __str__(self) -> str:
        return f"{self.kind}:{self.address}"

    @classmethod
    def parse(cls, text: str) -> WaitEndpoint:
        """The endpoint of a header value; :class:`InvalidWaitEndpointError` if it is not one."""
        if len(text) > MAX_ENDPOINT:
            raise InvalidWaitEndpointError(f"wait endpoint longer than {MAX_ENDPOINT} characters")
        kind, sep, address = text.partition(":")
        if not sep:
            raise InvalidWaitEndpointError(f"not a wait endpoint (no '<kind>:'): {text[:80]!r}")
        return cls(kind, address)


def process_id() -> str:
    """A random id naming one process (128 bits, hex): unique across restarts and hosts."""
    return secrets.token_hex(16)


def write_wait_context(header: MutableMapping[str, str], plan: WaitPlan, endpoint: str) -> None:
    """Write where the signals of a wait on ``plan`` go into ``header`` (a writable
    :class:`~wow_core.model.Header`). Nothing for a ``SENT`` plan."""
    if plan.stage is CommandStage.SENT:
        return
    put = header.__setitem__
    put(WAIT_ENDPOINT, endpoint)
    put(WAIT_STAGE, plan.stage.value)
    if plan.context_name:
        put(WAIT_CONTEXT, plan.context_name)
    if plan.processor_name:
        put(WAIT_PROCESSOR, plan.processor_name)
    if plan.function_name:
        put(WAIT_FUNCTION, plan.function_name)


def wanted(header: Mapping[str, str], signal: WaitSignal) -> bool:
    """Whether the wait described by ``header`` can use ``signal``: ``PROCESSED`` always
    (it carries the result and ends a rejected command's wait), a failed or final
    signal of a stage before the one waited for, and a signal of the stage waited for
    from a function the plan accepts. The rest is not sent to another process."""
    stage = signal.stage
    if stage is CommandStage.PROCESSED:
        return True
    waited = header.get(WAIT_STAGE)
    if waited is None:
        return False
    if stage.value != waited:
        try:
            waited_rank = CommandStage(waited).rank
        except ValueError:
            return False
        return stage.rank < waited_rank and (signal.final or not signal.succeeded)
    for key, name in (
        (WAIT_CONTEXT, signal.context_name),
        (WAIT_PROCESSOR, signal.processor_name),
        (WAIT_FUNCTION, signal.function_name),
    ):
        expected = header.get(key)
        if expected and expected != name:
            return False
    return True
