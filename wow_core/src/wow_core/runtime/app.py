"""WowApp: what a user's service declares, for ``wow run module:app`` and for tests.

::

    app = WowApp("bank", aggregates=[Account, Transfer])

    @app.component
    class AccountSummary: ...          # an @projection, @event_processor or @stateless_saga

    @app.installer
    def extras(runtime: WowRuntime) -> None:
        runtime.add_dispatcher(...)

The app holds declarations only; :meth:`WowApp.runtime` builds a
:class:`~wow_core.runtime.WowRuntime` from settings (the embedded default when nothing
is set): in-memory transport and stores, one process, no server.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wow_core.plugins import PluginRegistry
    from wow_core.runtime.runtime import WowRuntime
    from wow_core.runtime.settings import WowSettings

Installer = Callable[["WowRuntime"], Any]


class WowApp:
    """A service: its aggregates, extra body types and installers (event processors,
    sagas, projections and anything else that adds dispatchers to the runtime)."""

    def __init__(
        self,
        name: str = "",
        *,
        aggregates: Iterable[type[Any]] = (),
        body_types: Iterable[type[Any]] = (),
        installers: Iterable[Installer] = (),
        components: Iterable[object] = (),
        events: Any = None,
    ) -> None:
        self.name = name
        self.aggregates: list[type[Any]] = list(aggregates)
        self.body_types: list[type[Any]] = list(body_types)
        self.installers: list[Installer] = list(installers)
        self.components: list[object] = list(components)
        """Event processors, stateless sagas and projections (``wow_core.event``)."""
        self.events = events
        """``wow_core.event.EventDispatchOptions``: custom filters, error handlers, classifier."""
        self._built: weakref.WeakSet[WowRuntime] = weakref.WeakSet()

    def runtimes(self) -> tuple[WowRuntime, ...]:
        """The runtimes :meth:`runtime` built from this app that are still alive: what an
        installer added later (a plugin's ``use_...(app)``) did not reach."""
        return tuple(self._built)

    def aggregate(self, cls: type[Any]) -> type[Any]:
        """Class decorator: host this aggregate."""
        self.aggregates.append(cls)
        return cls

    def component(self, item: Any) -> Any:
        """Class decorator (or call with an instance): run this event processor, saga or
        projection. A class is instantiated without arguments when the runtime is built."""
        self.components.append(item)
        return item

    def installer(self, fn: Installer) -> Installer:
        """Decorator: call ``fn(runtime)`` when a runtime is built."""
        self.installers.append(fn)
        return fn

    def runtime(
        self, settings: WowSettings | None = None, *, plugins: PluginRegistry | None = None
    ) -> WowRuntime:
        """Build (not start) the runtime of this app."""
        from wow_core.runtime.assembly import build_runtime

        runtime = build_runtime(self, settings, plugins=plugins)
        self._built.add(runtime)
        return runtime
