"""The aggregate programming model, the command kernel and the command dispatcher that feeds it."""

from wow_core.modeling.aggregate import (
    AggregateDefinitionError,
    AggregateMetadata,
    CommandFunction,
    DomainError,
    Emit,
    aggregate,
    metadata_of,
    on_command,
    on_sourcing,
)
from wow_core.modeling.kernel import CommandKernel, CommandOutcome, StateCache
from wow_core.modeling.registry import AggregateRegistry, UnknownCommandError

__all__ = [
    "AggregateDefinitionError",
    "AggregateMetadata",
    "AggregateRegistry",
    "CommandFunction",
    "CommandKernel",
    "CommandOutcome",
    "DomainError",
    "Emit",
    "StateCache",
    "UnknownCommandError",
    "aggregate",
    "metadata_of",
    "on_command",
    "on_sourcing",
]
