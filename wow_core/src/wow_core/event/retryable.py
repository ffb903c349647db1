"""Immediate in-process retry of recoverable errors (spec 003, "RetryableFilter").

:class:`RetryableFilter` wraps the function filter of processor, saga and projection
chains and invokes the rest of the chain again when the error is classified
:attr:`Recoverability.RECOVERABLE`: up to ``max_retries`` retries (default 3), waiting an
exponential backoff of at least ``min_backoff`` seconds (default 2) between attempts.
The last attempt's error goes outward unchanged. The backoff ends at once when the
dispatcher stops (:mod:`wow_core.event.stopping`): the exchange is then released for
redelivery, neither acknowledged nor recorded as failed.

It keeps no durable state: it cannot recover after the process exits, and it ignores the
durable-compensation ``retry(...)`` marking of a function. A retry calls the same
function again, so its side effects must be idempotent. The snapshot chain has no
retry layer.

Classification is extensible: :meth:`ErrorClassifier.register` maps an exception type
to a recoverability, :meth:`ErrorClassifier.add_rule` adds a predicate, and an exception
can say it itself with a ``recoverable`` attribute or by subclassing
:class:`RecoverableError`. By default timeouts and connection errors are recoverable and
everything else is not.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from enum import StrEnum

from wow_core.event.exchange import FunctionExchange
from wow_core.event.filter import Next, filter_type, order
from wow_core.event.function import ComponentKind

logger = logging.getLogger("wow.event.retry")


class Recoverability(StrEnum):
    RECOVERABLE = "RECOVERABLE"
    UNRECOVERABLE = "UNRECOVERABLE"
    UNKNOWN = "UNKNOWN"


class RecoverableError(Exception):
    """Raise (a subclass of) this to mark an error as worth an immediate retry."""

    recoverable = True


Rule = Callable[[BaseException], Recoverability | None]


class ErrorClassifier:
    """Decides whether an error is worth retrying.

    Resolution: the rules added last win; then an explicit ``recoverable`` attribute on the
    error; then the most specific registered type in the error's MRO; else UNKNOWN
    (which is not retried).
    """

    def __init__(self, *, defaults: bool = True) -> None:
        self._types: dict[type[BaseException], Recoverability] = {}
        self._rules: list[Rule] = []
        if defaults:
            self.register(TimeoutError, Recoverability.RECOVERABLE)
            self.register(ConnectionError, Recoverability.RECOVERABLE)

    def register(self, error_type: type[BaseException], recoverability: Recoverability) -> ErrorClassifier:
        self._types[error_type] = recoverability
        return self

    def add_rule(self, rule: Rule) -> ErrorClassifier:
        """``rule(error)`` returns a recoverability, or None to let the next rule decide."""
        self._rules.append(rule)
        return self

    def classify(self, error: BaseException) -> Recoverability:
        for rule in reversed(self._rules):
            decided = rule(error)
            if decided is not None:
                return decided
        flag = getattr(error, "recoverable", None)
        if isinstance(flag, bool):
            return Recoverability.RECOVERABLE if flag else Recoverability.UNRECOVERABLE
        for cls in type(error).__mro__:
            found = self._types.get(cls)
            if found is not None:
                return found
        return Recoverability.UNKNOWN

    def is_recoverable(self, error: BaseException) -> bool:
        return self.classify(error) is Recoverability.RECOVERABLE


DEFAULT_CLASSIFIER = ErrorClassifier()

Sleep = Callable[[float], Awaitable[None]]


@order(0, after=["EventHandledNotifierFilter", "SagaHandledNotifierFilter", "ProjectedNotifierFilter"])
@filter_type(ComponentKind.EVENT_PROCESSOR, ComponentKind.STATELESS_SAGA, ComponentKind.PROJECTION)
class RetryableFilter:
    """Retries the inner chain on RECOVERABLE errors; the last error continues outward."""

    name = "RetryableFilter"

    def __init__(
        self,
        max_retries: int = 3,
        min_backoff: float = 2.0,
        *,
        max_backoff: float = 60.0,
        jitter: float = 0.5,
        classifier: ErrorClassifier | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if max_retries < 0 or min_backoff < 0 or not 0 <= jitter <= 1:
            raise ValueError("max_retries and min_backoff must be >= 0, jitter in [0, 1]")
        self.max_retries = max_retries
        self.min_backoff = min_backoff
        self.max_backoff = max(max_backoff, min_backoff)
        self.jitter = jitter
        self.classifier = classifier or DEFAULT_CLASSIFIER
        self._sleep = sleep

    def backoff(self, retry: int) -> float:
        """Delay before retry number ``retry`` (1-based): never below ``min_backoff``."""
        base = min(self.min_backoff * float(2 ** (retry - 1)), self.max_backoff)
        return base + base * self.jitter * random.random()

    async def filter(self, exchange: FunctionExchange, next: Next) -> None:
        retry = 0
        while True:
            try:
                await next(exchange)
                return
            except Exception as error:
                if retry >= self.max_retries or not self.classifier.is_recoverable(error):
                    raise
                retry += 1
                delay = self.backoff(retry)
                logger.info(
                    "%r failed with a recoverable %s; retry %d/%d in %.2fs",
                    exchange,
                    type(error).__name__,
                    retry,
                    self.max_retries,
                    delay,
                )
            stop = exchange.stop
            if stop is None:
                await self._sleep(delay)
            else:
                await stop.interrupt(self._sleep(delay), f"retry {retry}/{self.max_retries} in {delay:.2f}s")
