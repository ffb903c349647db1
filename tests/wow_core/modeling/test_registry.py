"""The aggregate registry: what a service hosts, and what it owns."""

from __future__ import annotations

from dataclasses import dataclass

from tests.accounts import ACCOUNT, Account
from wow_core.model import NamedAggregate
from wow_core.modeling import aggregate, on_command
from wow_core.modeling.registry import AggregateRegistry


@dataclass(frozen=True)
class Note:
    text: str


@dataclass(frozen=True)
class Noted:
    text: str


@aggregate("ops", "record", state=dict)
class Record:
    """Hosted by every service (as a failure recorder's records are): shared."""

    @on_command(create=True)
    def note(self, state: object, body: Note) -> Noted:
        return Noted(body.text)


def test_a_shared_aggregate_is_hosted_but_owned_by_no_service() -> None:
    registry = AggregateRegistry([Account])
    registry.register(Record, shared=True)
    record = NamedAggregate("ops", "record")
    assert registry.get(record) is not None  # its commands are decided here
    assert registry.owns(ACCOUNT)
    # local-first asks `owns`: a shared aggregate's messages are neither handed off locally
    # nor dropped when another service handled them
    assert not registry.owns(record)
    assert not registry.owns(NamedAggregate("ops", "elsewhere"))
