"""What marks a compensation message (spec 003, "Function Registration and Selection").

A compensation message is an event stream or state event re-delivered for exactly one
function that failed before. Its header names that function; dispatch then runs only
the function whose context, processor and function name match, never every eligible
function. The header also carries the compensation (execution-failure) id, which a
:class:`~wow_core.event.failure.FailureRecorder` uses to update the existing record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

COMPENSATION_ID = "compensation.id"
COMPENSATION_CONTEXT = "compensation.context"
COMPENSATION_PROCESSOR = "compensation.processor"
COMPENSATION_FUNCTION = "compensation.function"


class InvalidCompensationHeaderError(ValueError):
    """A header that names some, but not all, of a compensation target."""


@dataclass(frozen=True, slots=True)
class CompensationTarget:
    """The one function a compensation message is for."""

    context_name: str
    processor_name: str
    function_name: str
    compensation_id: str = ""

    @classmethod
    def from_header(cls, header: Mapping[str, str]) -> CompensationTarget | None:
        """The target named in ``header``, or None for an ordinary message.

        Raises :class:`InvalidCompensationHeaderError` when only part of the target is
        present: such a message must not silently become an ordinary message that runs
        every function again.
        """
        if (
            COMPENSATION_FUNCTION not in header
            and COMPENSATION_CONTEXT not in header
            and COMPENSATION_PROCESSOR not in header
        ):
            return None  # the common case: an ordinary message
        values = [
            header.get(key) for key in (COMPENSATION_CONTEXT, COMPENSATION_PROCESSOR, COMPENSATION_FUNCTION)
        ]
        if not all(values):
            raise InvalidCompensationHeaderError(
                "a compensation message must name context, processor and function in its header "
                f"({COMPENSATION_CONTEXT}, {COMPENSATION_PROCESSOR}, {COMPENSATION_FUNCTION}); got "
                + ", ".join(
                    f"{k}={v!r}" for k, v in zip(("context", "processor", "function"), values, strict=True)
                )
            )
        context, processor, function = (str(value) for value in values)
        return cls(context, processor, function, header.get(COMPENSATION_ID, ""))

    def to_header(self) -> dict[str, str]:
        header = {
            COMPENSATION_CONTEXT: self.context_name,
            COMPENSATION_PROCESSOR: self.processor_name,
            COMPENSATION_FUNCTION: self.function_name,
        }
        if self.compensation_id:
            header[COMPENSATION_ID] = self.compensation_id
        return header
