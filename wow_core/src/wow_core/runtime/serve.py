"""``wow run module:app`` and ``wow demo``: run a service as a process.

``wow run`` imports ``module:app`` (a :class:`~wow_core.runtime.app.WowApp`, or a
function returning one), builds its runtime from the settings (the embedded default
when nothing is set), starts it, logs what it runs on (transport, stores, plugins,
settings with secrets masked), and serves until SIGINT or SIGTERM. Then it stops in
order (dispatchers stop taking work and finish what they hold, queued copies are
flushed within ``WOW_RUNTIME__SHUTDOWN_TIMEOUT``, transports close) and exits 0, or 1
when the stop was not clean. A second SIGINT (or SIGTERM) during the stop forces it:
the process exits at once with status 130.

A stop signal during the start-up aborts it: ``wow run`` honours SIGINT and SIGTERM from
the first instant of the process (:mod:`wow_core.launcher`), stops after the step it is
in (importing the app, building the runtime) or, once the runtime is starting (connecting
to a broker that is slow or down), cancels the start, which stops and closes in order
what had started. It then exits 0 without having served (``stopped during start-up`` in
the log), or 1 when closing what was opened was not clean. It never dies by the signal.

An error in the user's module or app (a ``SyntaxError``, an exception at import, an
import inside the module that fails, an aggregate definition error, a filter-order
cycle) is one line, ``wow run: module:app: ... <file>, line <n>: <Error>: <message>``,
naming the innermost place in the user's own files (or, when the error is raised by a
check of the framework while the app is built, the place of that check), and exit
status 2. The traceback is printed too only with ``--debug`` or ``--log-level DEBUG``.

The log handler ``wow run`` and ``wow demo`` install masks the credentials of every URL
in a record (:class:`MaskCredentials`), whoever logged it: a broker client that logs its
connection URL does not leak its password. A handler the application configured itself
is left alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import logging
import os
import re
import signal
import sys
import sysconfig
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from wow_core.plugins import PluginError
from wow_core.runtime._text import a_type_name
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime, warn_of_a_store_of_its_own
from wow_core.runtime.gc_tuning import freeze_start_up
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import ENV_PREFIX, NESTED, SettingsError, mask_userinfo
from wow_core.stop_signals import StartupSignals

log = logging.getLogger("wow.run")

FORCED_EXIT = 130


class AppImportError(SettingsError):
    """``module:app`` that does not name a WowApp, or whose module or app is broken.

    ``original`` is the error of the user's code, if there was one (its traceback is
    printed with ``--debug``).
    """

    def __init__(self, message: str, original: BaseException | None = None) -> None:
        super().__init__(message)
        self.original = original


def _library_roots() -> list[Path]:
    """Where installed code lives: the standard library, site-packages and wow-py's packages."""
    roots = {
        Path(path)
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (path := sysconfig.get_path(key))
    }
    for name, module in list(sys.modules.items()):
        if name.split(".", 1)[0].startswith("wow_") and "." not in name and getattr(module, "__file__", None):
            roots.add(Path(module.__file__).resolve().parent)  # type: ignore[arg-type]
    return [root.resolve() for root in roots]


def _is_library(filename: str, roots: list[Path]) -> bool:
    """Installed code, or a frame whose file is not on disk (a compiled extension names its
    ``.pyx``/``.pxd`` source relative to its build: ``src/dependency_injector/providers.pxd``)."""
    path = Path(filename).resolve()
    return not path.is_file() or any(path.is_relative_to(root) for root in roots)


def _definition_named(error: BaseException, module: ModuleType) -> str | None:
    """``<file>, line <n>`` of the class of ``module`` the message of ``error`` names first."""
    message = str(error)
    found: list[tuple[int, str]] = []
    for name, value in vars(module).items():
        if isinstance(value, type) and value.__module__ == module.__name__:
            match = re.search(rf"\b{re.escape(name)}\b", message)
            if match is None:
                continue
            try:
                line = inspect.getsourcelines(value)[1]
            except (OSError, TypeError):
                continue
            found.append((match.start(), f"{inspect.getsourcefile(value)}, line {line}"))
    return min(found)[1] if found else None


def error_location(error: BaseException, module: ModuleType | None = None) -> str:
    """``<file>, line <n>`` of ``error``: the innermost frame in the user's own files; when
    none is (a check of the framework raised while the app was built), the definition of
    the app's ``module`` that the message names (``Cart has no @on_command function``);
    else the innermost frame."""
    if isinstance(error, SyntaxError) and error.filename:
        return f"{error.filename}, line {error.lineno}"
    frames = [
        frame for frame in traceback.extract_tb(error.__traceback__) if not frame.filename.startswith("<")
    ]
    roots = _library_roots()
    users = [frame for frame in frames if not _is_library(frame.filename, roots)]
    if users:
        return f"{users[-1].filename}, line {users[-1].lineno}"
    named = _definition_named(error, module) if module is not None else None
    if named is not None:
        return named
    return f"{frames[-1].filename}, line {frames[-1].lineno}" if frames else "an unknown place"


def describe_app_error(error: BaseException, module: ModuleType | None = None) -> str:
    """``<file>, line <n>: <Error>: <message>``, on one line."""
    message = error.msg if isinstance(error, SyntaxError) else str(error)
    text = f"{error_location(error, module)}: {type(error).__name__}"
    one_line = " ".join(str(message).split())
    return f"{text}: {one_line}" if one_line else text


def load_app(target: str) -> WowApp:
    """Import ``module:attribute``; the attribute is a WowApp or returns one."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise AppImportError(f"{target!r} is not 'module:app' (for example wow_core.examples.bank.app:app)")
    if "/" in module_name or "\\" in module_name or module_name.endswith(".py"):
        parts = module_name.removesuffix(".py").replace("\\", "/").split("/")
        dotted = ".".join(part for part in parts if part not in ("", "."))
        raise AppImportError(
            f"{module_name!r} is a file path; name the module with dots: {dotted}:{attribute} "
            "(run from the directory it is imported from)"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and (module_name == error.name or module_name.startswith(error.name + ".")):
            raise AppImportError(f"cannot import {module_name!r}: {error}") from None
        raise AppImportError(
            f"{target}: cannot import {module_name!r}: {describe_app_error(error)}", error
        ) from None
    except Exception as error:
        raise AppImportError(
            f"{target}: cannot import {module_name!r}: {describe_app_error(error)}", error
        ) from None
    try:
        value: Any = getattr(module, attribute)
    except AttributeError:
        raise AppImportError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if callable(value) and not isinstance(value, WowApp):
        try:
            value = value()
        except Exception as error:
            raise AppImportError(
                f"{target}: calling {attribute}() failed: {describe_app_error(error)}", error
            ) from None
    if not isinstance(value, WowApp):
        raise AppImportError(f"{target} is {a_type_name(value)}, not a wow_core.runtime.app.WowApp")
    return value


class MaskCredentials(logging.Filter):
    """Masks URL credentials (:func:`~wow_core.runtime.settings.mask_userinfo`) in the
    message of every record that passes the handler it is attached to."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_userinfo(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The format of ``wow run``'s log lines unless ``--log-format`` gives one."""
TRACE_FIELDS = {"trace_id": "", "span_id": ""}
"""What a format's ``%(trace_id)s`` / ``%(span_id)s`` print where no trace is current or
tracing is off (wow-otel's log correlation sets them on every record otherwise)."""


def _configure_logging(level: str, format: str = LOG_FORMAT) -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=level.upper(), stream=sys.stderr)
        for handler in root.handlers:
            handler.setFormatter(logging.Formatter(format, defaults=TRACE_FIELDS))
            handler.addFilter(MaskCredentials())


def log_startup(runtime: WowRuntime, plugins: Any, sections: dict[str, Any] | None = None) -> None:
    """What the process runs on; settings (and plugin sections) with secrets masked; a
    warning when the members of the service would not share its event store."""
    from wow_core.runtime.cli import settings_lines

    for key, value in runtime.describe().items():
        log.info("%s: %s", key, value)
    origins = sorted(plugins.origins.values(), key=lambda origin: origin.plugin)
    log.info(
        "plugins: %s", ", ".join(f"{o.plugin} ({o.distribution} {o.version})" for o in origins) or "none"
    )
    service_setting = f"{ENV_PREFIX}SERVICE_NAME="
    for line in settings_lines(runtime.settings, ENV_PREFIX):
        if line.startswith(service_setting) and runtime.name != runtime.settings.service_name:
            line = f"{line} (unused: the app is named {runtime.name!r})"
        log.info("setting %s", line)
    for name, section in (sections or {}).items():
        for line in settings_lines(section, ENV_PREFIX + name.upper() + NESTED):
            log.info("setting %s", line)
    warn_of_a_store_of_its_own(runtime, plugins.names("event_store"))


async def serve(
    runtime: WowRuntime,
    stop_signals: tuple[signal.Signals, ...] = (),
    startup: StartupSignals | None = None,
) -> int:
    """Start ``runtime``, serve until a stop signal, stop in order; return the exit status.

    A stop signal while the runtime starts (or one ``startup`` recorded before the event
    loop ran) cancels the start: what had started is stopped and closed in order, and
    the status is 0 (1 when that stop was not clean) without serving."""
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    signals = stop_signals or (signal.SIGINT, signal.SIGTERM)

    def on_signal(signum: int) -> None:
        if stop_requested.is_set():
            log.warning("second %s: forcing the stop", signal.Signals(signum).name)
            logging.shutdown()
            os._exit(FORCED_EXIT)
        log.info("%s received: stopping (send it again to force)", signal.Signals(signum).name)
        stop_requested.set()

    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        if startup is not None and startup.received is not None:  # read once the loop handles them
            on_signal(startup.received)
        if not await _started(runtime, stop_requested):
            clean = await runtime.stop()  # idempotent: the result of the stop the cancel made
            log.info("stopped during start-up %s", "cleanly" if clean else "with work left behind")
            return 0 if clean else 1
        tuning = runtime.settings.runtime
        if tuning.gc_freeze:
            # What start-up built lives as long as the process: out of the collector's reach.
            freeze_start_up(tuning.gc_threshold)
        log.info("serving %s; SIGINT or SIGTERM stops", runtime.name)
        await stop_requested.wait()
        log.info(
            "stopping: dispatchers, then flushes, then transports (timeout %.1fs)", runtime.shutdown_timeout
        )
        clean = await runtime.stop()
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
    log.info("stopped %s", "cleanly" if clean else "with work left behind (see the warnings above)")
    return 0 if clean else 1


async def _started(runtime: WowRuntime, stop_requested: asyncio.Event) -> bool:
    """Start ``runtime`` unless a stop is requested first: then cancel the start (the
    runtime stops what had started) and return False. A failed start raises its error."""
    if stop_requested.is_set():
        return False
    starting = asyncio.ensure_future(runtime.start())
    stopping = asyncio.ensure_future(stop_requested.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if starting.done():
        starting.result()  # a StartError propagates
        return True
    log.info("start-up interrupted: cancelling the start, closing what was opened")
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting  # Lifecycle.start stops what started, then re-raises the cancellation
    return False


def configure_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app", help="the service to run, as module:attribute (a WowApp)")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument(
        "--log-format",
        default=LOG_FORMAT,
        help=(
            "a logging format of the log lines; %%(trace_id)s and %%(span_id)s print the current "
            "trace with wow-otel's tracing on (empty otherwise)"
        ),
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="log at DEBUG and print the traceback of an error in the app (also with --log-level DEBUG)",
    )


def run_command(invocation: Any) -> int:
    args = invocation.args
    startup = StartupSignals.installed()  # by wow_core.launcher, for the ``wow`` executable
    debug = bool(getattr(args, "debug", False)) or str(args.log_level).upper() == "DEBUG"
    _configure_logging("DEBUG" if debug else args.log_level, args.log_format)
    try:
        app = load_app(args.app)
        if _interrupted(startup, "importing the app"):
            return 0
        container = invocation.container()
        try:
            runtime = build_runtime(app, container=container)
        except (SettingsError, PluginError):
            raise
        except Exception as error:
            module = sys.modules.get(str(args.app).partition(":")[0])
            raise AppImportError(
                f"{args.app}: the app could not be built: {describe_app_error(error, module)}", error
            ) from None
    except AppImportError as error:
        if debug and error.original is not None:
            traceback.print_exception(error.original, file=sys.stderr)
        raise
    if _interrupted(startup, "building the runtime"):
        return 0  # nothing was started or connected yet
    log_startup(runtime, invocation.plugins, container.plugin_sections())
    return asyncio.run(serve(runtime, startup=startup))


def _interrupted(startup: StartupSignals | None, step: str) -> bool:
    """Whether a stop signal arrived while ``wow run`` was ``step`` (logged: it stops)."""
    if startup is None or startup.received is None:
        return False
    log.info("%s received while %s: stopped during start-up, nothing started", startup.name, step)
    return True


# -- wow demo ------------------------------------------------------------------------------


BANK = "wow_core.examples.bank"


def _bank_package() -> str:
    """The bank example's package, ``wow_core.examples.bank``: in the wheel a copy, in a
    source checkout a symbolic link to ``examples/bank`` (the editable install sees it)."""
    try:
        found = importlib.util.find_spec(BANK) is not None
    except ImportError:
        found = False
    if not found:
        raise SettingsError(
            f"the bank example ({BANK}) is not installed: it is part of the wow-core wheel "
            "(and of a source checkout of wow-py, as a link to examples/bank)"
        )
    return BANK


def configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accounts", type=int, default=40, help="accounts to open (default 40)")
    parser.add_argument("--transfers", type=int, default=400, help="transfers to attempt (default 400)")
    parser.add_argument("--concurrency", type=int, default=64, help="commands in flight at once (default 64)")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the batch (default 7)")
    parser.add_argument("--timeout", type=float, default=10.0, help="deadline of each wait, seconds")


def demo_command(invocation: Any) -> int:
    args = invocation.args
    if args.accounts < 3 or args.transfers < 0 or args.concurrency < 1:
        raise SettingsError("wow demo needs --accounts >= 3, --transfers >= 0 and --concurrency >= 1")
    # Warnings of the framework and the broker clients, each naming its origin.
    _configure_logging("WARNING", format="%(levelname)s %(name)s: %(message)s")
    package = _bank_package()
    app = importlib.import_module(f"{package}.app").app
    demo = importlib.import_module(f"{package}.demo")
    DemoAborted, print_report, run_demo = demo.DemoAborted, demo.print_report, demo.run_demo

    container = invocation.container()
    try:
        runtime = build_runtime(app, container=container)
    except (SettingsError, PluginError):
        raise
    except Exception as error:  # a plugin's own check (wow-otel's OTEL_* exporters): one line, as `wow run`
        message = f"the bank service could not be built: {describe_app_error(error)}"
        raise AppImportError(message, error) from None
    out = invocation.out
    described = runtime.describe()
    out.write(
        f"wow demo: the bank service ({described['aggregates']})\n"
        f"  transport {described['transport']}, command bus {described['command bus']}, "
        f"event store {described['event store']}\n"
        f"  running {args.accounts} accounts, {args.transfers} transfers, {args.concurrency} commands "
        "at once...\n"
    )
    out.flush()

    async def main() -> Any:
        async with runtime:
            return await run_demo(
                runtime,
                accounts=args.accounts,
                transfers=args.transfers,
                concurrency=args.concurrency,
                seed=args.seed,
                timeout=args.timeout,
            )

    try:
        report = asyncio.run(main())
    except DemoAborted as error:
        print(f"wow demo: {error}", file=sys.stderr)
        return 1
    print_report(report, runtime, out)
    if report.conserved and not report.unexpected:
        return 0
    problems = [f"{report.unexpected} commands timed out"] if report.unexpected else []
    if not report.conserved:
        problems.append("the money was not conserved")
    print(f"wow demo: {' and '.join(problems)} (exit status 1)", file=sys.stderr)
    return 1
