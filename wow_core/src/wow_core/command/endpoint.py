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
``command_wait_tail_stage``    a chain's next hop (:meth:`~wow_core.command.CommandWait.chain`):
                               the stage each command the saga sends must reach
``command_wait_tail_context``  ... its context, processor and function filters
``command_wait_tail_processor``
``command_wait_tail_function``
``command_wait_root``          on a command a saga sent for a chain: the id of the
                               command whose wait its signals serve
=============================  ===============================================

An endpoint names one process (the address carries a random process id) and stays the
same for the life of that process. A plan for ``SENT`` writes nothing: ``SENT`` is
decided by the sender itself.

:class:`WaitContext` is the same information as a value: read from a header
(:meth:`WaitContext.of`), written into one (:meth:`WaitContext.write`), carried onward to
the commands a saga sends (:meth:`WaitContext.onward`), or carried by another envelope and
handed to :meth:`~wow_core.command.WaitCoordinator.forward`.
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
WAIT_TAIL_STAGE = "command_wait_tail_stage"
WAIT_TAIL_CONTEXT = "command_wait_tail_context"
WAIT_TAIL_PROCESSOR = "command_wait_tail_processor"
WAIT_TAIL_FUNCTION = "command_wait_tail_function"
WAIT_ROOT = "command_wait_root"

WAIT_KEYS = (
    WAIT_ENDPOINT,
    WAIT_STAGE,
    WAIT_CONTEXT,
    WAIT_PROCESSOR,
    WAIT_FUNCTION,
    WAIT_TAIL_STAGE,
    WAIT_TAIL_CONTEXT,
    WAIT_TAIL_PROCESSOR,
    WAIT_TAIL_FUNCTION,
    WAIT_ROOT,
)
"""Every header key of the wait context."""
MAX_NAME = 255
"""Longest stage, context, processor or function name accepted from a header."""

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
    tail = plan.tail
    if tail is not None:
        put(WAIT_TAIL_STAGE, tail.stage.value)
        if tail.context_name:
            put(WAIT_TAIL_CONTEXT, tail.context_name)
        if tail.processor_name:
            put(WAIT_TAIL_PROCESSOR, tail.processor_name)
        if tail.function_name:
            put(WAIT_TAIL_FUNCTION, tail.function_name)


def _stage(text: str | None) -> CommandStage | None:
    if text is None:
        return None
    try:
        stage = CommandStage(text)
    except ValueError:
        raise InvalidWaitEndpointError(f"not a wait stage: {text[:80]!r}") from None
    if stage is CommandStage.SENT:
        raise InvalidWaitEndpointError("SENT is never waited for through a wait context")
    return stage


def _name(header: Mapping[str, str], key: str) -> str:
    value = header.get(key, "")
    if len(value) > MAX_NAME:
        raise InvalidWaitEndpointError(f"{key} longer than {MAX_NAME} characters")
    return value


@dataclass(frozen=True, slots=True)
class WaitContext:
    """Where the signals of one command go and what its waiter accepts: the wait context
    of a header as a value (see the module doc).

    ``plan`` is the wait plan the waiter registered (with its ``tail`` for a chain);
    ``root_id`` is set on the context of a command a saga sent for a chain: the id of
    the command whose wait its signals serve.
    """

    endpoint: str
    plan: WaitPlan
    root_id: str = ""

    @classmethod
    def of(cls, header: Mapping[str, str]) -> WaitContext | None:
        """The wait context ``header`` carries, or None (nobody waits past ``SENT``).

        :class:`InvalidWaitEndpointError` for a context that is present but malformed
        (an unknown stage, an endpoint that is not ``<kind>:<address>``, an oversized name).
        """
        endpoint = header.get(WAIT_ENDPOINT)
        if endpoint is None:
            return None
        WaitEndpoint.parse(endpoint)
        stage = _stage(header.get(WAIT_STAGE))
        if stage is None:
            raise InvalidWaitEndpointError(f"{WAIT_ENDPOINT} without {WAIT_STAGE}")
        tail_stage = _stage(header.get(WAIT_TAIL_STAGE))
        tail = (
            None
            if tail_stage is None
            else WaitPlan(
                tail_stage,
                False,
                _name(header, WAIT_TAIL_CONTEXT),
                _name(header, WAIT_TAIL_PROCESSOR),
                _name(header, WAIT_TAIL_FUNCTION),
            )
        )
        if tail is not None and stage is not CommandStage.SAGA_HANDLED:
            raise InvalidWaitEndpointError(f"a chain's head is SAGA_HANDLED, not {stage.value}")
        plan = WaitPlan(
            stage,
            False,
            _name(header, WAIT_CONTEXT),
            _name(header, WAIT_PROCESSOR),
            _name(header, WAIT_FUNCTION),
            tail,
        )
        return cls(endpoint, plan, _name(header, WAIT_ROOT))

    def write(self, header: MutableMapping[str, str]) -> None:
        """Replace the wait context of ``header`` (writable) with this one."""
        for key in WAIT_KEYS:
            if key in header:
                del header[key]
        write_wait_context(header, self.plan, self.endpoint)
        if self.root_id:
            header[WAIT_ROOT] = self.root_id

    def onward(
        self, command_id: str, context_name: str, processor_name: str, function_name: str
    ) -> WaitContext | None:
        """The context of a command that the saga function ``context_name``,
        ``processor_name``, ``function_name`` sends while handling the events of the
        command ``command_id`` that carries this context: the chain's next hop (its
        ``tail`` becomes the plan, the root is the chain's first command).

        None when this context is not a chain's head, or names another saga: a saga's
        commands then carry no wait context.
        """
        plan = self.plan
        tail = plan.tail
        if tail is None:
            return None
        for expected, name in (
            (plan.context_name, context_name),
            (plan.processor_name, processor_name),
            (plan.function_name, function_name),
        ):
            if expected and expected != name:
                return None
        return WaitContext(self.endpoint, tail, self.root_id or command_id)


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
