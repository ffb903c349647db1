"""The aggregates a service hosts, and building commands addressed to them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from wow_core.model import (
    DEFAULT_TENANT_ID,
    AggregateId,
    BodyTypeRegistry,
    CommandMessage,
    Header,
    NamedAggregate,
    new_id,
)
from wow_core.modeling.aggregate import AggregateMetadata, CommandFunction, metadata_of


class UnknownCommandError(LookupError):
    """A command body type no registered aggregate handles."""


class AggregateRegistry:
    """Named aggregates to their metadata; command body types to their aggregate."""

    __slots__ = ("_by_body", "_by_name", "_shared")

    def __init__(self, aggregates: Iterable[type[Any] | AggregateMetadata[Any]] = ()) -> None:
        self._by_name: dict[NamedAggregate, AggregateMetadata[Any]] = {}
        self._by_body: dict[type[Any], AggregateMetadata[Any]] = {}
        self._shared: set[NamedAggregate] = set()
        for item in aggregates:
            self.register(item)

    def register(
        self, aggregate: type[Any] | AggregateMetadata[Any], *, shared: bool = False
    ) -> AggregateMetadata[Any]:
        """Host ``aggregate``. ``shared``: every service hosts it (a failure recorder's
        records), so no service owns it: local-first neither hands its messages off nor
        drops a distributed copy another service handled (:meth:`owns`)."""
        metadata = aggregate if isinstance(aggregate, AggregateMetadata) else metadata_of(aggregate)
        if metadata.named_aggregate in self._by_name:
            raise ValueError(f"aggregate {metadata.named_aggregate} is registered twice")
        for body_type in metadata.commands:
            other = self._by_body.get(body_type)
            if other is not None:
                raise ValueError(
                    f"command {body_type.__qualname__} is handled by both {other.named_aggregate} "
                    f"and {metadata.named_aggregate}"
                )
        self._by_name[metadata.named_aggregate] = metadata
        for body_type in metadata.commands:
            self._by_body[body_type] = metadata
        if shared:
            self._shared.add(metadata.named_aggregate)
        return metadata

    def get(self, named_aggregate: NamedAggregate) -> AggregateMetadata[Any] | None:
        return self._by_name.get(named_aggregate)

    def owns(self, named_aggregate: NamedAggregate) -> bool:
        """Hosted here and by this service alone (not :meth:`register`-ed ``shared``)."""
        return named_aggregate in self._by_name and named_aggregate not in self._shared

    @property
    def named_aggregates(self) -> frozenset[NamedAggregate]:
        return frozenset(self._by_name)

    def __iter__(self) -> Any:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def register_body_types(self, registry: BodyTypeRegistry) -> BodyTypeRegistry:
        """Register every command, event and state class with ``registry`` (for the wire).

        The event classes are all those :meth:`AggregateMetadata.event_types` names: the
        ones command functions declare they return, not only those a sourcing function
        applies."""
        for metadata in self._by_name.values():
            for cls in (*metadata.commands, *metadata.event_types(), metadata.state_type):
                if cls not in registry:
                    registry.register(cls)
        return registry

    def handler_of(self, body_type: type[Any]) -> AggregateMetadata[Any] | None:
        """The aggregate that handles commands of ``body_type``, if one is registered."""
        return self._by_body.get(body_type)

    def function_for(self, body: object) -> tuple[AggregateMetadata[Any], CommandFunction]:
        metadata = self._by_body.get(type(body))
        if metadata is None:
            raise UnknownCommandError(f"no registered aggregate handles {type(body).__qualname__}")
        return metadata, metadata.commands[type(body)]

    def command(
        self,
        body: object,
        aggregate_id: str | None = None,
        *,
        tenant_id: str = DEFAULT_TENANT_ID,
        request_id: str = "",
        aggregate_version: int | None = None,
        header: Mapping[str, str] | None = None,
        is_void: bool = False,
    ) -> CommandMessage[Any]:
        """A command carrying ``body`` to the aggregate that handles it.

        A creation command without ``aggregate_id`` gets a new one; any other command
        needs it.
        """
        metadata, function = self.function_for(body)
        if aggregate_id is None:
            if not function.create:
                raise ValueError(f"{type(body).__qualname__} needs an aggregate_id")
            aggregate_id = new_id()
        return CommandMessage(
            aggregate_id=AggregateId(metadata.named_aggregate, aggregate_id, tenant_id),
            body=body,
            name=type(body).__name__,
            request_id=request_id,
            header=Header(header),
            is_create=function.create,
            allow_create=function.allow_create,
            is_void=is_void,
            aggregate_version=aggregate_version,
        )
