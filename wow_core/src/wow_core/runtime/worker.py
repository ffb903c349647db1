"""``wow worker module:commands --transport NAME``: execute the application commands
queued on one named transport (spec 004).

``module:commands`` names an :class:`~wow_core.application.ApplicationCommands`, or a
function that takes the process's :class:`~wow_core.application.TransportRegistry`
(built from ``WOW_APPLICATION__TRANSPORTS``) and returns one. ``--transport`` must be
one of the configured names, and every asynchronous command the bus handles must name
a configured transport: otherwise the command exits 2 before connecting to anything.

The worker runs ``--concurrency`` (default ``WOW_APPLICATION__WORKER__CONCURRENCY``)
commands at once. SIGTERM or SIGINT stops it gracefully: it takes no new record, waits
for those in flight (up to ``WOW_APPLICATION__WORKER__SHUTDOWN_TIMEOUT``), closes its
receiver and transports, and exits 0; what it had not acknowledged is delivered again
to the group. A second signal forces the exit (status 130).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from typing import Any

from wow_core.application import (
    ApplicationCommands,
    ApplicationSettings,
    CommandWorker,
    TransportConfigurationError,
    TransportRegistry,
)
from wow_core.runtime._text import a_type_name
from wow_core.runtime.runtime import StartError
from wow_core.runtime.serve import FORCED_EXIT, AppImportError, _configure_logging, describe_app_error
from wow_core.runtime.settings import SettingsError

log = logging.getLogger("wow.worker")

READY = "worker ready"
"""The log line that says the worker cannot miss a command sent from now on."""


def configure_worker(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "commands", help="the application commands, as module:attribute (an ApplicationCommands or a factory)"
    )
    parser.add_argument("--transport", required=True, help="the named transport to execute the commands of")
    parser.add_argument("--concurrency", type=int, default=None, help="commands executed at once")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def load_commands(target: str, registry: TransportRegistry) -> ApplicationCommands:
    """Import ``module:attribute``: an ApplicationCommands, or ``factory(registry)`` returning one."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise AppImportError(f"{target!r} is not 'module:attribute' (for example shop.commands:commands)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise AppImportError(
            f"{target}: cannot import {module_name!r}: {describe_app_error(error)}", error
        ) from None
    value: Any = getattr(module, attribute, None)
    if value is None:
        raise AppImportError(f"module {module_name!r} has no attribute {attribute!r}")
    if callable(value) and not isinstance(value, ApplicationCommands):
        try:
            value = value(registry)
        except Exception as error:
            raise AppImportError(
                f"{target}: calling {attribute}(registry) failed: {describe_app_error(error, module)}", error
            ) from None
    if not isinstance(value, ApplicationCommands):
        raise AppImportError(
            f"{target} is {a_type_name(value)}, not a wow_core.application.ApplicationCommands"
        )
    return value


async def serve_worker(
    worker: CommandWorker, registry: TransportRegistry, stop_signals: tuple[signal.Signals, ...] = ()
) -> int:
    """Start the transports, run ``worker`` until a stop signal, close; return the exit status."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = stop_signals or (signal.SIGINT, signal.SIGTERM)

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second %s: forcing the exit", signal.Signals(signum).name)
            logging.shutdown()
            os._exit(FORCED_EXIT)
        log.info(
            "%s received: finishing the commands in flight (send it again to force)",
            signal.Signals(signum).name,
        )
        stop.set()

    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    ready = asyncio.Event()

    async def announce() -> None:
        await ready.wait()
        log.info(
            "%s: transport %s (%s), topic %s, group %s, concurrency %d",
            READY,
            worker.transport_name,
            worker.transport.name,
            worker.topic,
            worker.group,
            worker.concurrency,
        )

    announcing = asyncio.ensure_future(announce())
    try:
        try:
            await registry.start()
        except Exception as error:
            raise StartError(f"transport {worker.transport_name!r}", error) from error
        await worker.run(stop, ready)
    finally:
        announcing.cancel()
        for signum in signals:
            loop.remove_signal_handler(signum)
        await registry.close()
    log.info("worker stopped")
    return 0


def worker_command(invocation: Any) -> int:
    args = invocation.args
    _configure_logging(args.log_level)
    if args.concurrency is not None and not 1 <= args.concurrency <= 1024:
        raise SettingsError(f"--concurrency is 1 to 1024, not {args.concurrency}")
    container = invocation.container()  # every setting and plugin section checked up front
    settings = container.settings()
    section = settings.section("application", ApplicationSettings)
    registry = TransportRegistry.from_settings(settings, invocation.plugins)
    if args.transport not in registry:
        configured = ", ".join(registry.names) or "none"
        raise SettingsError(
            f"--transport {args.transport!r} is not a named transport of WOW_APPLICATION__TRANSPORTS "
            f"(configured: {configured})"
        )
    commands = load_commands(args.commands, registry)
    try:
        commands.bus.validate()
    except TransportConfigurationError as error:
        raise SettingsError(f"{args.commands}: {error}") from None
    worker = commands.worker(
        registry,
        args.transport,
        section,
        service_name=settings.service_name,
        concurrency=args.concurrency,
        decode_failure_handler=container.decode_failure_handler(),
    )
    return asyncio.run(serve_worker(worker, registry))
