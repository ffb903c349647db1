"""An AsyncAPI 3.0 document of a service: what it receives and sends, on which topics.

``wow asyncapi module:app`` prints it (``--yaml`` as YAML). It is generated from what the
app registers and the transport the settings select:

- a **channel** per topic the service touches (the transport's own topic names: a Redis
  stream ``wow.bank.account:command``, a Kafka topic ``wow.bank.account.command``): the
  command topic of each hosted aggregate, its event and state topics, and the event and
  state topics that the service's processors, sagas and projections read;
- a **message** per body type on it, whose payload is the wire envelope (``docs/
  transports/spi.md``, wire version 2: short keys, each described in the schema) with
  the body's own JSON schema in place of ``b`` and its registered type name as ``t`` (a
  stream's events ``e``: one of the aggregate's event types each);
- **operations**: ``receive`` of the commands of each hosted aggregate, ``send`` of its
  event streams and states, ``receive`` of the streams and states each event function
  reads. A saga's commands are sent to the topics of the aggregates that handle them,
  when they are hosted here (the document names only what this process knows).

The document says nothing about a transport's keys, partitions or consumer groups: a
message is keyed by its aggregate id on every built-in transport (``docs/transports``).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import TypeAdapter

from wow_core.event.function import ComponentKind, FunctionKind
from wow_core.model import CommandMessage, NamedAggregate, TopicKind
from wow_core.model.wire import V2_FIELDS, BodyTypeRegistry, _CommandV2, _StateV2, _StreamV2
from wow_core.transport.defaults import DefaultTopicNaming, TopicNaming, naming_of

ASYNCAPI_VERSION = "3.0.0"
_REF = "#/components/schemas/{model}"
_KEY = re.compile(r"[^A-Za-z0-9_.\-]")

_ENVELOPES: dict[TopicKind, Any] = {
    TopicKind.COMMAND: _CommandV2,
    TopicKind.EVENT: _StreamV2,
    TopicKind.STATE: _StateV2,
}


def _describe_keys(schema: Any) -> None:
    """Each short key of a version 2 envelope schema described by the field it holds."""
    if isinstance(schema, dict):
        for key, prop in schema.get("properties", {}).items():
            if key in V2_FIELDS and isinstance(prop, dict):
                prop.setdefault("description", V2_FIELDS[key])
        for value in schema.values():
            _describe_keys(value)
    elif isinstance(schema, list):
        for value in schema:
            _describe_keys(value)


def _key(text: str) -> str:
    """A component or channel key: letters, digits, ``.``, ``_`` and ``-``."""
    return _KEY.sub("_", text)


class _Document:
    def __init__(self, runtime: Any, naming: TopicNaming, registry: BodyTypeRegistry) -> None:
        self.runtime = runtime
        self.naming = naming
        self.registry = registry
        self.schemas: dict[str, Any] = {}
        self.messages: dict[str, Any] = {}
        self.channels: dict[str, Any] = {}
        self.operations: dict[str, Any] = {}

    # -- schemas ---------------------------------------------------------------------------

    def _schema(self, tp: Any, *, envelope: bool = False) -> dict[str, Any]:
        schema = TypeAdapter(tp).json_schema(ref_template=_REF)
        if envelope:
            _describe_keys(schema)
        for name, definition in schema.pop("$defs", {}).items():
            self.schemas.setdefault(name, definition)
        return schema

    def _body(self, cls: type[Any]) -> dict[str, Any]:
        name = self.registry.name_of(cls) if cls in self.registry else self.registry.register(cls)
        key = _key(name)
        if key not in self.schemas:
            schema = self._schema(cls)
            schema.setdefault("title", cls.__name__)
            if cls.__doc__:
                schema.setdefault("description", " ".join(cls.__doc__.split()))
            self.schemas[key] = schema
        return {"$ref": _REF.format(model=key)}

    def _envelope(self, kind: TopicKind) -> dict[str, Any]:
        key = f"wow.{kind.value}.envelope"
        if key not in self.schemas:
            self.schemas[key] = self._schema(_ENVELOPES[kind], envelope=True)
        return {"$ref": _REF.format(model=key)}

    def _payload(
        self, kind: TopicKind, body_types: list[type[Any]], state: type[Any] | None
    ) -> dict[str, Any]:
        """The envelope with the bodies of this message in place: each body schema paired
        with its type name (bodies of the same shape stay told apart by ``t``)."""
        pairs = [
            {"properties": {"t": {"const": self.registry.name_of(cls)}, "b": self._body(cls)}}
            for cls in body_types
        ]
        if kind is TopicKind.COMMAND:
            detail = pairs[0]
        else:
            item = pairs[0] if len(pairs) == 1 else {"oneOf": pairs}
            detail = {"properties": {"e": {"items": item}}}
            if kind is TopicKind.STATE and state is not None:
                detail = {
                    "properties": {
                        "t": {"const": self.registry.name_of(state)},
                        "st": self._body(state),
                        "es": detail,
                    }
                }
        return {"allOf": [self._envelope(kind), detail]}

    # -- channels ----------------------------------------------------------------------------

    def channel(self, named: NamedAggregate, kind: TopicKind) -> tuple[str, dict[str, Any]]:
        address = self.naming.topic(named, kind)
        key = _key(address)
        channel = self.channels.get(key)
        if channel is None:
            metadata = self.runtime.aggregates.get(named)
            what = {
                TopicKind.COMMAND: f"Commands to {named} aggregates",
                TopicKind.EVENT: f"Event streams of {named} aggregates (one per decided command)",
                TopicKind.STATE: f"States of {named} aggregates after each event stream",
            }[kind]
            channel = self.channels[key] = {
                "address": address,
                "title": f"{named} {kind.value}",
                "description": what + ", keyed by aggregate id.",
                "messages": {},
            }
            if metadata is not None:
                self._messages_of(channel, named, metadata, kind)
        return key, channel

    def _messages_of(
        self, channel: dict[str, Any], named: NamedAggregate, metadata: Any, kind: TopicKind
    ) -> None:
        if kind is TopicKind.COMMAND:
            for cls in metadata.commands:
                self._message(
                    channel, f"{named}.{cls.__name__}", kind, [cls], None, f"Command {cls.__name__}"
                )
            return
        events = list(metadata.event_types())
        if not events:
            return
        state = metadata.state_type if kind is TopicKind.STATE else None
        title = f"{named} event stream" if kind is TopicKind.EVENT else f"{named} state"
        self._message(channel, f"{named}.{kind.value}", kind, events, state, title)

    def _message(
        self,
        channel: dict[str, Any],
        name: str,
        kind: TopicKind,
        body_types: list[type[Any]],
        state: type[Any] | None,
        title: str,
    ) -> None:
        key = _key(name)
        if key not in self.messages:
            self.messages[key] = {
                "name": name,
                "title": title,
                "contentType": "application/json",
                "payload": self._payload(kind, body_types, state),
            }
        channel["messages"][key] = {"$ref": f"#/components/messages/{key}"}

    def operation(self, key: str, action: str, channel_key: str, title: str) -> None:
        channel = self.channels[channel_key]
        if not channel["messages"] or key in self.operations:
            return
        self.operations[key] = {
            "action": action,
            "title": title,
            "channel": {"$ref": f"#/channels/{channel_key}"},
            "messages": [{"$ref": f"#/channels/{channel_key}/messages/{m}"} for m in channel["messages"]],
        }


def asyncapi_document(runtime: Any, *, title: str | None = None, version: str = "0.1.0") -> dict[str, Any]:
    """The AsyncAPI 3.0 document of ``runtime`` (built, not necessarily started): see the
    module doc."""
    transport = getattr(runtime, "transport", None)
    naming = (
        naming_of(transport)
        if transport is not None
        else DefaultTopicNaming(runtime.settings.messaging.topic_prefix)
    )
    registry = runtime.aggregates.register_body_types(BodyTypeRegistry())
    doc = _Document(runtime, naming, registry)
    service = _key(runtime.name)
    for metadata in runtime.aggregates:
        named = metadata.named_aggregate
        commands, _ = doc.channel(named, TopicKind.COMMAND)
        doc.operation(
            f"{service}.receive.{_key(str(named))}.commands", "receive", commands, f"{named} decides them"
        )
        events, _ = doc.channel(named, TopicKind.EVENT)
        doc.operation(
            f"{service}.send.{_key(str(named))}.events", "send", events, "after each decided command"
        )
        states, _ = doc.channel(named, TopicKind.STATE)
        doc.operation(f"{service}.send.{_key(str(named))}.states", "send", states, "after each event stream")
    dispatch = getattr(runtime, "event_dispatch", None)
    registrars = dispatch.registrars if dispatch is not None else {}
    for component, registrar in registrars.items():
        for function in registrar:
            kind = TopicKind.EVENT if function.kind is FunctionKind.EVENT else TopicKind.STATE
            for named in sorted(function.named_aggregates, key=str):
                channel, _ = doc.channel(named, kind)
                doc.operation(
                    f"{service}.receive.{_key(function.qualified_name)}.{_key(str(named))}",
                    "receive",
                    channel,
                    f"{component.value.lower().replace('_', ' ')} {function.qualified_name}",
                )
            if component is ComponentKind.STATELESS_SAGA:
                _saga_sends(doc, service, function, runtime)
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": title or runtime.name,
            "version": version,
            "description": f"The messages of the wow-py service {runtime.name!r}, by wow asyncapi.",
        },
        "defaultContentType": "application/json",
        "channels": doc.channels,
        "operations": doc.operations,
        "components": {"messages": doc.messages, "schemas": doc.schemas},
    }


def _saga_sends(doc: _Document, service: str, function: Any, runtime: Any) -> None:
    """A saga sends the commands its return annotation names, to the aggregates here that
    handle them."""
    for cls in _returned_commands(function.invoker):
        metadata = runtime.aggregates.handler_of(cls)
        if metadata is None:
            continue
        channel, _ = doc.channel(metadata.named_aggregate, TopicKind.COMMAND)
        doc.operation(
            f"{service}.send.{_key(function.qualified_name)}.{_key(cls.__name__)}",
            "send",
            channel,
            f"saga {function.qualified_name} sends {cls.__name__}",
        )


def _returned_commands(invoker: Any) -> Iterable[type[Any]]:
    try:
        hint = typing.get_type_hints(invoker).get("return")
    except Exception:
        return []
    found: list[type[Any]] = []
    stack = [hint]
    while stack:
        current = stack.pop()
        origin = typing.get_origin(current)
        args = typing.get_args(current)
        if origin is CommandMessage and args and isinstance(args[0], type):
            found.append(args[0])
        elif args:
            stack.extend(args)
    return found


# -- wow asyncapi --------------------------------------------------------------------------


def configure_asyncapi(parser: Any) -> None:
    parser.add_argument("app", help="the service, as module:attribute (a WowApp)")
    parser.add_argument("--yaml", action="store_true", help="print YAML (needs PyYAML) instead of JSON")
    parser.add_argument("--title", default=None, help="the document's title (default: the service name)")
    parser.add_argument("--version", dest="doc_version", default="0.1.0", help="the API version it states")


def asyncapi_command(invocation: Any) -> int:
    """``wow asyncapi module:app``: the document on standard output."""
    import json

    from wow_core.runtime.assembly import build_runtime
    from wow_core.runtime.serve import AppImportError, describe_app_error, load_app
    from wow_core.settings import SettingsError

    args = invocation.args
    app = load_app(args.app)
    try:
        runtime = build_runtime(app, container=invocation.container())
    except SettingsError:
        raise
    except Exception as error:
        raise AppImportError(
            f"{args.app}: the app could not be built: {describe_app_error(error)}", error
        ) from None
    document = asyncapi_document(runtime, title=args.title, version=args.doc_version)
    if args.yaml:
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise SettingsError("--yaml needs PyYAML (pip install pyyaml); JSON needs nothing") from None
        invocation.out.write(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    else:
        invocation.out.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    return 0
