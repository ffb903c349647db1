"""The module named by the ``wow`` entry point: hook implementations only."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from wow_carrier_pigeon.transport import PigeonSettings, PigeonTransport
from wow_core.spi import hookimpl

if TYPE_CHECKING:
    from wow_core.spi import ProcessSettings


def _create_transport(settings: ProcessSettings) -> PigeonTransport:
    # The factory receives the process's settings; the plugin reads its own section from it.
    return PigeonTransport(settings.section("pigeon", PigeonSettings))


@hookimpl
def register_transports(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("carrier_pigeon", _create_transport)


@hookimpl
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    register("pigeon", PigeonSettings)
