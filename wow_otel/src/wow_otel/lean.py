"""A lean path to the SDK's span pipeline: what the decorators' spans cost on the hot path.

The SDK's ``Tracer.start_span`` builds a span of about fifteen objects tracked by the
garbage collector (two bounded lists and their deques, two bounded attribute maps, five
locks, a span context...), cleans every attribute value, and copies it all into a
``ReadableSpan`` at the end. Inside the runtime, where every command holds five spans
and a batch span processor keeps a few hundred ended ones, those objects are most of
what the collector walks: the young collections run three times as often and the full
ones follow (``docs/observability.md``, "Cost").

:func:`lean_tracer` returns a :class:`LeanTracer` in front of an SDK tracer when the
span processors are the SDK's batch and simple processors (their ``on_start`` does
nothing; their ``on_end`` and the exporters read a ``ReadableSpan``). A recording
:class:`LeanSpan` is an SDK ``ReadableSpan`` itself, as the SDK's own span is (its
name, context, attributes, events and status in the ``ReadableSpan``'s fields, the
tracer's resource and instrumentation scope), handed to the processors as it is when it
ends: exporters receive the same spans as from the SDK's tracer, and no copy is made
at the end (one object per span fewer for the collector to walk while the batch
processor holds it). An event without attributes shares one empty read-only mapping.
The tracer's sampler decides every root and every child of a sampled
parent (its attributes and trace state are kept); a child of a parent that was not
sampled, under a ``parentbased_*`` sampler that drops such children (the SDK's
defaults), is a :class:`~opentelemetry.trace.NonRecordingSpan` with a new span id and
the parent's trace id, flags and trace state, without a call to the sampler.

Anything else goes to the SDK tracer itself: another processor (one whose
``on_start`` may read or change the span), span limits tighter than the decorators'
spans need or an attribute length limit, the SDK's own tracer metrics, a disabled
tracer, or an SDK whose internals are not the ones this module reads (the processor
list of ``SynchronousMultiSpanProcessor``, the tracer's span limits and scope).
"""

from __future__ import annotations

import collections
import logging
import os
import random
import traceback
from collections.abc import Callable, Mapping, Sequence
from time import monotonic, time_ns
from types import MappingProxyType, TracebackType
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Decision, ParentBased, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import DEFAULT_TRACE_STATE
from opentelemetry.util import types

from wow_otel.current import (
    DIRECT,
    INDEXED,
    SPAN_KEY,
    current,
    flags_of,
    ids_flags_of,
    is_valid_of,
    keeps_context,
    span_of,
    state_of,
)

log = logging.getLogger(__name__)

QUIET_ON_START = (BatchSpanProcessor, SimpleSpanProcessor)
"""Span processors whose ``on_start`` does nothing: a lean span never reaches them
before it ends."""

_MIN_ATTRIBUTES = 64
"""The decorators' spans carry at most about twenty attributes and a few events: limits
at or above this are never reached."""

_PLAIN = frozenset((str, bool, int, float))
_SAMPLED = TraceFlags.SAMPLED
_RANDOM = TraceFlags.RANDOM_TRACE_ID
_UNSET = Status(StatusCode.UNSET)
_NO_ATTRIBUTES: types.Attributes = MappingProxyType({})
"""The attributes of every event that has none (one mapping, read-only)."""
FLAGS = tuple(TraceFlags(value) for value in range(256))
"""Every ``TraceFlags`` value, built once: a ``TraceFlags`` is an ``int`` subclass the
collector tracks, one per span context otherwise."""


def _event_in_place() -> bool:
    """Whether an SDK ``Event`` is its name, timestamp and attributes only, as this
    module builds it without its two ``__init__`` frames (else the constructor)."""
    try:
        built = Event("e", _NO_ATTRIBUTES, 1)
        return vars(built) == {"_name": "e", "_timestamp": 1, "_attributes": _NO_ATTRIBUTES}
    except TypeError:  # no __dict__: another layout
        return False


_EVENT_IN_PLACE = _event_in_place()

DROP_WARNING_SECONDS = 10.0
"""At most one warning per this many seconds for spans dropped at a full batch queue."""

_LOW_64 = TraceIdRatioBased.TRACE_ID_LIMIT
_getrandbits = random.getrandbits
_new_tuple = tuple.__new__
_new_object = object.__new__
_current = current
_SPAN_KEY = SPAN_KEY


def new_span_context(
    trace_id: int, span_id: int, flags: int, state: Any = None, *, remote: bool = False
) -> SpanContext:
    """A valid ``SpanContext`` (local unless ``remote``) of ids known to be valid (non-zero,
    in range), built as the tuple the API's constructor builds
    (:data:`~wow_otel.current.INDEXED`) without its frame and range checks; the API's
    constructor when the layout is another."""
    if state is None:
        state = DEFAULT_TRACE_STATE
    if INDEXED:
        return _new_tuple(SpanContext, (trace_id, span_id, remote, FLAGS[flags], state, True))
    return SpanContext(trace_id, span_id, remote, FLAGS[flags], state)


def _emit_of(processor: object) -> Any:
    """What a lean span's end calls for ``processor``: the batch processor's own queue
    (``BatchProcessor.emit``: its shutdown, fork, queue-full and wake-up handling) where
    the SDK's internals are the ones read here, else ``processor.on_end``. Both skip a
    span that is not sampled, as the SDK's ``on_end`` does (checked by the caller)."""
    if type(processor) is BatchSpanProcessor:
        emit = getattr(getattr(processor, "_batch_processor", None), "emit", None)
        if callable(emit):
            return emit
    return processor.on_end  # type: ignore[attr-defined]


_BATCH_FIELDS = ("_queue", "_shutdown", "_pid", "_max_queue_size", "_max_export_batch_size", "_worker_awaken")
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def _batch_of(processors: tuple[Any, ...] | None) -> Any:
    """The SDK's ``BatchProcessor`` of a single ``BatchSpanProcessor`` whose internals are
    the ones :meth:`LeanSpan.end` reads (its queue, limits, wake-up event, shutdown flag
    and process id), else ``None`` (the processors' ``on_end`` / ``emit``)."""
    if processors is None or len(processors) != 1 or type(processors[0]) is not BatchSpanProcessor:
        return None
    batch = getattr(processors[0], "_batch_processor", None)
    if batch is None or not all(hasattr(batch, name) for name in _BATCH_FIELDS):
        return None
    if not isinstance(batch._queue, collections.deque) or not callable(getattr(batch, "emit", None)):
        return None
    return batch


def _processors(tracer: SdkTracer) -> tuple[Any, ...] | None:
    """The span processors of ``tracer`` if a lean span may bypass their ``on_start``."""
    multi = tracer.span_processor
    if type(multi) is not SynchronousMultiSpanProcessor:
        return None
    found = getattr(multi, "_span_processors", None)
    if not isinstance(found, tuple) or not all(type(item) in QUIET_ON_START for item in found):
        return None
    return found


def _limits_fit(limits: object) -> bool:
    if not isinstance(limits, SpanLimits):
        return False
    if (
        getattr(limits, "max_span_attribute_length", 0) is not None
        or getattr(limits, "max_attribute_length", 0) is not None
    ):
        return False
    counts = [
        getattr(limits, name, 0) for name in ("max_span_attributes", "max_events", "max_event_attributes")
    ]
    return all(count is None or count >= _MIN_ATTRIBUTES for count in counts)


def _delegates(sampler: object, *names: str) -> tuple[object, ...]:
    """The delegates ``names`` of a ``ParentBased`` sampler (``()`` for another sampler)."""
    if not isinstance(sampler, ParentBased):
        return ()
    return tuple(getattr(sampler, name, None) for name in names)


def _all(found: tuple[object, ...], sampler: object) -> bool:
    return bool(found) and all(item is sampler for item in found)


def lean_tracer(tracer: trace_api.Tracer) -> trace_api.Tracer:
    """A :class:`LeanTracer` in front of ``tracer`` when its pipeline allows (module
    docstring), else ``tracer`` itself."""
    if type(tracer) is not SdkTracer:
        return tracer
    scope = getattr(tracer, "_instrumentation_scope", None)
    enabled = getattr(tracer, "_is_enabled", None)
    metrics = getattr(tracer, "_tracer_metrics", None)
    if (
        scope is None
        or not callable(enabled)
        or type(metrics).__name__ != "NoOpTracerMetrics"
        or not _limits_fit(getattr(tracer, "_span_limits", None))
        or _processors(tracer) is None
    ):
        return tracer
    return LeanTracer(tracer)


class LeanTracer(trace_api.Tracer):
    """Starts :class:`LeanSpan` s for an SDK tracer (module docstring); anything it does not
    cover (links, a start time, a processor added since) goes to the SDK tracer."""

    def __init__(self, tracer: SdkTracer) -> None:
        self.sdk = tracer
        sampler = self.sampler = tracer.sampler
        # What the sampler decides without being called (the SDK's samplers, exactly):
        # a root always sampled; a child of a sampled parent sampled; a child of a parent
        # not sampled dropped (decided once, at the root).
        always = sampler is ALWAYS_ON
        self.samples_roots = always or _all(_delegates(sampler, "_root"), ALWAYS_ON)
        self.follows_sampled = always or _all(
            _delegates(sampler, "_remote_parent_sampled", "_local_parent_sampled"), ALWAYS_ON
        )
        self.drops_unsampled = sampler is ALWAYS_OFF or _all(
            _delegates(sampler, "_remote_parent_not_sampled", "_local_parent_not_sampled"), ALWAYS_OFF
        )
        self.drops_roots = sampler is ALWAYS_OFF or _all(_delegates(sampler, "_root"), ALWAYS_OFF)
        # A root under the SDK's ratio sampler (``parentbased_traceidratio``): its decision
        # is the trace id's low 64 bits below the sampler's bound, as the sampler computes
        # it, without its three frames and result (a root has no trace state to pass on).
        (root,) = _delegates(sampler, "_root") or (sampler,)
        bound = getattr(root, "bound", None) if type(root) is TraceIdRatioBased else None
        self.root_bound: int | None = bound if type(bound) is int else None
        self.processor = tracer.span_processor
        self._processors = _processors(tracer)
        self.emits: tuple[Any, ...] = ()
        self.batch: Any = None
        """The SDK ``BatchProcessor`` a span's end queues into in place (:func:`_batch_of`)."""
        self.queue: Any = None
        """Its queue (else ``None``: :attr:`emits` are called)."""
        self.max_queue = self.max_export = 0
        self._bind()
        self.dropped = 0
        """Spans dropped at the batch processor's full queue (:meth:`queue_full`)."""
        self._dropped_since = 0
        self._warned_at: float | None = None
        self._ids = tracer.id_generator
        self.span_id = tracer.id_generator.generate_span_id
        self._random_span_ids = type(tracer.id_generator) is RandomIdGenerator
        random_ids = getattr(tracer.id_generator, "is_trace_id_random", None)
        self._random_ids = bool(random_ids()) if callable(random_ids) else False
        # start_owning's common case reads the context, the span context tuple and the
        # tracer's configuration directly: only where they are what it reads
        config = getattr(tracer, "_tracer_config", None)
        self._direct = (
            DIRECT
            and INDEXED
            and type(getattr(config, "is_enabled", None)) is bool
            and tracer._is_enabled() is config.is_enabled  # type: ignore[union-attr]
        )
        # What every span of this tracer shares, on its own span class: not set per span.
        span_type: type[LeanSpan] = type(
            "LeanSpan",
            (LeanSpan,),
            {
                "__module__": __name__,
                "_tracer": self,
                "_resource": tracer.resource,
                "_instrumentation_info": tracer.instrumentation_info,
                "_instrumentation_scope": tracer._instrumentation_scope,
            },
        )
        self.span_type = span_type
        keeps_context(span_type)

    def queue_full(self) -> None:
        """A span dropped at the batch processor's full queue (its oldest: the queue is a
        bounded deque, as the processor's ``emit`` drops it): counted in :attr:`dropped`
        and by the processor's own metrics, and told in one warning per
        :data:`DROP_WARNING_SECONDS` with the count and what to change. The processor's
        ``emit`` makes a log record for every span it drops (its logger's filter then
        keeps one per 20 seconds, without a count): the cost of a record per span just
        when the process is short of time."""
        self.dropped += 1
        self._dropped_since += 1
        metrics = getattr(self.batch, "_metrics", None)
        drop_items = getattr(metrics, "drop_items", None)
        if callable(drop_items):
            drop_items(1)
        now = monotonic()
        if self._warned_at is None or now - self._warned_at >= DROP_WARNING_SECONDS:
            log.warning(
                "span queue full (%d spans): %d dropped %s, %d in all; the exporter does "
                "not keep up (OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_SCHEDULE_DELAY, "
                "OTEL_BSP_MAX_EXPORT_BATCH_SIZE, or sample fewer traces)",
                len(self.batch._queue),
                self._dropped_since,
                "so far" if self._warned_at is None else "since the last warning",
                self.dropped,
            )
            self._warned_at = now
            self._dropped_since = 0

    def _bind(self) -> None:
        """What a span's end reads of the processors (:meth:`LeanSpan.end`), from
        :attr:`_processors`: the calls, or the batch processor's queue and its limits,
        read once here, not per span (the queue is the same deque after a fork)."""
        self.emits = tuple(map(_emit_of, self._processors or ()))
        batch = self.batch = _batch_of(self._processors)
        self.queue = None if batch is None else batch._queue
        self.max_queue = 0 if batch is None else batch._max_queue_size
        self.max_export = 0 if batch is None else batch._max_export_batch_size

    def _lean(self) -> bool:
        multi: Any = self.processor
        if multi._span_processors is not self._processors:  # one added since: check again
            self._processors = _processors(self.sdk)
            self._bind()
        return self._processors is not None and self.sdk._is_enabled()

    def _new_span_id(self) -> int:
        if self._random_span_ids:  # the SDK's RandomIdGenerator, without its frame
            return _getrandbits(64) or self.span_id()
        return self.span_id()

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace_api.Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace_api.Span:
        if links or start_time is not None or not self._lean():
            return self.sdk.start_span(
                name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
            )
        return self.start_owning(name, context, kind, _cleaned(attributes) if attributes else None)

    def start_owning(
        self,
        name: str,
        context: Context | None,
        kind: SpanKind,
        attributes: dict[str, Any] | None,
        build: Callable[[], dict[str, Any]] | None = None,
    ) -> trace_api.Span:
        """:meth:`start_span` for a caller that hands over ``attributes``: a dict of its own
        it never touches again, kept as the span's attributes without a copy (a value
        that is not a plain scalar is still cleaned as the SDK would). What the
        decorators call; the SDK tracer when the pipeline has changed (module docstring).

        ``build``, instead of ``attributes``: a function that builds them, called only for
        a span that records where the sampler decides without reading them (see
        :meth:`start_lazy`)."""
        # The common cases in a few operations (a sampled child under the always-on or
        # parent-based sampler, a root under always-on; a dropped child of a parent not
        # sampled, a root of the ratio sampler or always_off): the parent read from the
        # context, the ids, the span context tuple and the span's fields, no frame each.
        if attributes and not _PLAIN.issuperset(map(type, attributes.values())):
            attributes = _cleaned(attributes)
        multi: Any = self.processor
        if self._direct and multi._span_processors is self._processors and self.sdk._tracer_config.is_enabled:
            found: Any = (_current() if context is None else context).get(_SPAN_KEY, None)
            kind_of = type(found)
            parent = (
                found._context
                if kind_of is self.span_type or kind_of is NonRecordingSpan
                else (None if found is None else found.get_span_context())
            )
            if parent is not None and parent[5]:  # a valid parent (INDEXED)
                parent_flags = parent[3]
                span_id = (_getrandbits(64) if self._random_span_ids else 0) or self.span_id()
                if parent_flags & _SAMPLED:
                    if self.follows_sampled:
                        flags = FLAGS[parent_flags & _RANDOM | _SAMPLED]
                        ids = (parent[0], span_id, False, flags, parent[4], True)
                        if build is not None:
                            attributes = _built(build)
                        # _new in place: four spans of a command in five are sampled children
                        span: LeanSpan = _new_object(self.span_type)
                        span._name = name
                        span._context = _new_tuple(SpanContext, ids)
                        span._parent = parent
                        span._kind = kind
                        span._attributes = attributes if attributes is not None else {}
                        span._start_time = time_ns()
                        return span
                elif self.drops_unsampled:  # decided at the root: not sampled, nothing records
                    ids = (parent[0], span_id, False, FLAGS[parent_flags & _RANDOM], parent[4], True)
                    return NonRecordingSpan(_new_tuple(SpanContext, ids))
            elif self.samples_roots:
                trace_id = self._ids.generate_trace_id()
                span_id = (_getrandbits(64) if self._random_span_ids else 0) or self.span_id()
                flags = FLAGS[(_RANDOM if self._random_ids else 0) | _SAMPLED]
                if build is not None:
                    attributes = _built(build)
                return self._new(
                    name,
                    _new_tuple(SpanContext, (trace_id, span_id, False, flags, DEFAULT_TRACE_STATE, True)),
                    None,
                    kind,
                    attributes,
                )
            elif self.drops_roots or self.root_bound is not None:
                # the ratio sampler's decision from the trace id (as in _start); always_off
                trace_id = self._ids.generate_trace_id()
                span_id = (_getrandbits(64) if self._random_span_ids else 0) or self.span_id()
                random_flag = _RANDOM if self._random_ids else 0
                bound = self.root_bound
                if self.drops_roots or bound is None or trace_id & _LOW_64 >= bound:
                    return NonRecordingSpan(new_span_context(trace_id, span_id, random_flag))
                if build is not None:
                    attributes = _built(build)
                span_context = new_span_context(trace_id, span_id, random_flag | _SAMPLED)
                return self._new(name, span_context, None, kind, attributes)
        return self._start(name, context, kind, _built(build) if build is not None else attributes)

    def start_lazy(
        self, name: str, context: Context | None, kind: SpanKind, build: Callable[[], dict[str, Any]]
    ) -> trace_api.Span:
        """:meth:`start_owning` with the attributes built by ``build`` only for a span that
        records: where the sampler's decision does not read them (a root under the ratio
        sampler or ``always_off``, a child of a parent not sampled that is dropped), a
        span that does not record is decided first, without them."""
        return self.start_owning(name, context, kind, None, build)

    def _new(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any] | None,
    ) -> LeanSpan:
        """A recording span of this tracer, its fields set here (no ``__init__`` frame; what
        every span of the tracer shares is on :attr:`span_type`)."""
        span: LeanSpan = _new_object(self.span_type)
        span._name = name
        span._context = context
        span._parent = parent
        span._kind = kind
        span._attributes = attributes if attributes is not None else {}
        span._start_time = time_ns()
        if not flags_of(context) & _SAMPLED:  # recorded, not sampled: not exported
            span._sampled = False
        return span

    def _start(
        self,
        name: str,
        context: Context | None,
        kind: SpanKind,
        attributes: dict[str, Any] | None,
    ) -> trace_api.Span:
        """:meth:`start_owning` past its common case (``attributes`` cleaned there): every
        sampler, the SDK's way when the pipeline changed."""
        if not self._lean():
            return self.sdk.start_span(name, context, kind, attributes)
        parent: SpanContext | None = span_of(context).get_span_context()
        if parent is None or not is_valid_of(parent):
            parent = None
            trace_id = self._ids.generate_trace_id()
            flags = _RANDOM if self._random_ids else 0
            if self.samples_roots:
                span_context = new_span_context(trace_id, self._new_span_id(), flags | _SAMPLED)
                return self._new(name, span_context, None, kind, attributes)
            if self.drops_roots:
                return NonRecordingSpan(new_span_context(trace_id, self._new_span_id(), flags))
            bound = self.root_bound
            if bound is not None:
                if trace_id & _LOW_64 < bound:
                    span_context = new_span_context(trace_id, self._new_span_id(), flags | _SAMPLED)
                    return self._new(name, span_context, None, kind, attributes)
                return NonRecordingSpan(new_span_context(trace_id, self._new_span_id(), flags))
        else:
            trace_id, _, parent_flags = ids_flags_of(parent)
            flags = parent_flags & _RANDOM
            if parent_flags & _SAMPLED:
                if self.follows_sampled:
                    span_context = new_span_context(
                        trace_id, self._new_span_id(), flags | _SAMPLED, state_of(parent)
                    )
                    return self._new(name, span_context, parent, kind, attributes)
            elif self.drops_unsampled:  # decided at the root: not sampled, nothing records
                return NonRecordingSpan(
                    new_span_context(trace_id, self._new_span_id(), flags, state_of(parent))
                )
        result = self.sampler.should_sample(context, trace_id, name, kind, attributes, ())
        decision = result.decision
        if decision is Decision.RECORD_AND_SAMPLE:
            flags |= _SAMPLED
        span_context = new_span_context(trace_id, self._new_span_id(), flags, result.trace_state)
        if decision is Decision.DROP:
            return NonRecordingSpan(span_context)
        sampled = result.attributes
        return self._new(name, span_context, parent, kind, _cleaned(sampled) if sampled else None)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self.sdk.start_as_current_span(*args, **kwargs)


def _built(build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The attributes ``build`` returns, cleaned as :meth:`LeanTracer.start_owning` cleans."""
    attributes = build()
    if attributes and not _PLAIN.issuperset(map(type, attributes.values())):
        return _cleaned(attributes)
    return attributes


def _cleaned(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` with the SDK's validation when a value is not a plain scalar."""
    if _PLAIN.issuperset(map(type, attributes.values())):
        return dict(attributes)
    return dict(BoundedAttributes(attributes=attributes))


class LeanSpan(trace_api.Span, ReadableSpan):
    """A recording span of a :class:`LeanTracer`, and the SDK's ``ReadableSpan`` the
    processors receive when it ends (as the SDK's own span is both): no copy at the end
    (module docstring). Made by :meth:`LeanTracer._new` only (its fields set there, the
    tracer, resource and instrumentation scope on the tracer's span class). Used from the
    event loop's thread, as the decorators do; changes after the end are ignored, as the
    SDK's are."""

    _tracer: LeanTracer
    _attributes: dict[str, Any]
    _context: SpanContext
    # the same for every span until changed (on the instance): not set per span
    _events: Any = ()
    _links: Sequence[trace_api.Link] = ()
    _status = _UNSET
    _end_time: int | None = None
    _sampled = True
    """Whether the span's context is sampled (set on the instance where it is not)."""

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        if self._end_time is None:
            if _PLAIN.issuperset(map(type, attributes.values())):
                self._attributes.update(attributes)
            else:
                self._attributes.update(_cleaned(attributes))

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self._end_time is None:
            if type(value) in _PLAIN:
                self._attributes[key] = value
            else:
                self._attributes.update(_cleaned({key: value}))

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        if self._end_time is not None:
            return
        if _EVENT_IN_PLACE:
            event = _new_object(Event)
            event._name = name
            event._timestamp = time_ns() if timestamp is None else timestamp
            event._attributes = _cleaned(attributes) if attributes else _NO_ATTRIBUTES
        else:
            event = Event(name, _cleaned(attributes) if attributes else _NO_ATTRIBUTES, timestamp)
        events = self._events
        if type(events) is list:
            events.append(event)
        else:
            self._events = [event]

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        log.warning("a link added after the start of span %r is not kept", self._name)

    def update_name(self, name: str) -> None:
        if self._end_time is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end_time is not None or self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            if status.status_code is not StatusCode.UNSET:
                self._status = status
        elif status is not StatusCode.UNSET:
            self._status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """The SDK's ``exception`` event (type, message, stack trace, escaped)."""
        module = type(exception).__module__
        qualname = type(exception).__qualname__
        recorded: dict[str, Any] = {
            "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            recorded.update(attributes)
        self.add_event("exception", recorded, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end_time is not None:
            log.warning("Calling end() on an ended span.")
            return
        self._end_time = time_ns() if end_time is None else end_time
        tracer = self._tracer
        if tracer.processor._span_processors is not tracer._processors:  # changed since: the SDK's way
            tracer.processor.on_end(self)
        elif self._sampled:
            queue = tracer.queue
            if queue is None:
                for emit in tracer.emits:
                    emit(self)
                return
            # BatchProcessor.emit's common case in place: queued, the worker woken at a
            # full batch; a shut-down processor, a fork or a full queue go through emit
            batch = tracer.batch
            if batch._shutdown or batch._pid != _pid:
                batch.emit(self)
                return
            if len(queue) >= tracer.max_queue:
                tracer.queue_full()
            queue.appendleft(self)  # at a full queue, the oldest span goes (a bounded deque)
            if len(queue) >= tracer.max_export and not batch._worker_awaken.is_set():
                batch._worker_awaken.set()  # read here: a fork makes it again

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        if exc_val is not None and self._end_time is None:
            self.record_exception(exc_val, escaped=True)
            self.set_status(Status(StatusCode.ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        self.end()
