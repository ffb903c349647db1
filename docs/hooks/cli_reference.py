"""mkdocs hook: render the ``wow`` command reference from the registered commands.

A page containing ``<!-- wow:cli-reference -->`` gets, in its place, the help of every
``wow`` subcommand the installed plugins registered (the core's included), exactly as
``wow <command> --help`` prints it.
"""

from __future__ import annotations

import argparse
from typing import Any

from wow_core.plugins import Command, load_plugins
from wow_core.runtime.cli import build_parser

MARKER = "<!-- wow:cli-reference -->"
WIDTH = 88


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=WIDTH)


def render() -> str:
    registry = load_plugins()
    top = build_parser(registry)
    top.formatter_class = _formatter
    parts = ["```text", top.format_help().rstrip(), "```", ""]
    for registration in registry.all("command"):
        command: Command = registration.value
        parser = argparse.ArgumentParser(
            prog=f"wow {registration.name}",
            description=command.description or command.help,
            formatter_class=_formatter,
        )
        command.configure(parser)
        origin = registration.origin
        parts += [
            f"## `wow {registration.name}`",
            "",
            f"Registered by plugin `{origin.plugin}` of `{origin.distribution}` {origin.version}.",
            "",
            "```text",
            parser.format_help().rstrip(),
            "```",
            "",
        ]
    return "\n".join(parts)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
