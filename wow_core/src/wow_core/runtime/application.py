"""The process's application-command transports, in one call.

:func:`transport_registry` is what a producer of application commands (spec 004) calls to
get the :class:`~wow_core.application.TransportRegistry` that ``wow worker`` builds: the
named transports of ``WOW_APPLICATION__TRANSPORTS`` from this process's settings (every
``WOW_*`` variable checked) and installed plugins::

    async with transport_registry() as registry:
        await commands(registry).bus.dispatch(ChargeCard("4242", 10))

It is exported as ``wow_core.transport_registry``. It lives in the runtime, not in
:mod:`wow_core.application`, because reading the settings and the plugins is the
runtime's (see the architecture page).
"""

from __future__ import annotations

from wow_core.application import TransportRegistry
from wow_core.runtime.container import WowContainer, create_container

__all__ = ["transport_registry"]


def transport_registry(container: WowContainer | None = None) -> TransportRegistry:
    """:meth:`TransportRegistry.from_settings` over ``container``'s settings and plugins
    (default: :func:`~wow_core.runtime.container.create_container`, which reads the
    environment and checks every section). Not started: ``async with`` starts it and
    closes it, or call ``start()`` and ``close()``."""
    container = container if container is not None else create_container()
    return TransportRegistry.from_settings(container.settings(), container.plugins())
