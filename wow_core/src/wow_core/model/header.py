"""Message headers: string keys to string values, mutable until marked read-only."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping


class ReadOnlyHeaderError(RuntimeError):
    """Raised when a header that was marked read-only (emitted) is written to."""


class Header(MutableMapping[str, str]):
    """A message's header.

    Every copy of a message gets its own ``Header`` (``copy()``), so two routes never
    rewrite one another. Before a message is emitted its header is marked read-only;
    a write after that raises :class:`ReadOnlyHeaderError` instead of silently
    changing what a receiver already saw.
    """

    __slots__ = ("_data", "_read_only")

    # Well-known keys.
    LOCAL_FIRST = "local_first"
    """``"true"`` on a distributed copy whose local receivers admitted it."""
    LOCAL_FIRST_DISABLED = "local_first.disabled"
    """``"true"`` on a message that must not take the local-first route."""

    def __init__(self, data: Mapping[str, str] | None = None, *, read_only: bool = False) -> None:
        self._data: dict[str, str] = {}
        if data:
            for key, value in data.items():
                self._data[_check_key(key)] = _check_value(key, value)
        self._read_only = read_only

    @property
    def read_only(self) -> bool:
        return self._read_only

    def with_read_only(self) -> Header:
        """Mark this header read-only and return it."""
        self._read_only = True
        return self

    def copy(self) -> Header:
        """An independent, writable copy."""
        header = Header.__new__(Header)
        header._data = dict(self._data)
        header._read_only = False
        return header

    def copy_without(self, prefix: str) -> Header:
        """An independent, writable copy without the keys that start with ``prefix`` (the
        checked keys and values taken as they are)."""
        header = Header.__new__(Header)
        data = self._data
        header._data = {k: v for k, v in data.items() if not k.startswith(prefix)} if data else {}
        header._read_only = False
        return header

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    # Direct versions of the Mapping mixins, which go through __getitem__ and KeyError.
    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return self._data.get(key, default)

    def __setitem__(self, key: str, value: str) -> None:
        if self._read_only:
            raise ReadOnlyHeaderError(f"header is read-only; cannot set {key!r}")
        self._data[_check_key(key)] = _check_value(key, value)

    def replace_pair(self, key: str, value: str | None, other: str, other_value: str | None) -> bool:
        """Set ``key`` to ``value`` and ``other`` to ``other_value`` (``None``: remove it),
        in one call; ``False`` when both already were so (nothing written, a read-only
        header accepted), else ``True``. For a pair written together on every message (the
        W3C ``traceparent`` and ``tracestate`` of a tracing middleware). Raises
        :class:`ReadOnlyHeaderError` if it would change a read-only header."""
        data = self._data
        if data.get(key) == value and data.get(other) == other_value:
            return False
        if self._read_only:
            raise ReadOnlyHeaderError(f"header is read-only; cannot set {key!r}")
        # checked before either is written: a bad pair changes nothing
        if value is not None and (type(value) is not str or type(key) is not str or not key):
            _check_value(_check_key(key), value)
        if other_value is not None and (type(other_value) is not str or type(other) is not str or not other):
            _check_value(_check_key(other), other_value)
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
        if other_value is None:
            data.pop(other, None)
        else:
            data[other] = other_value
        return True

    def get_pair(self, key: str, other: str) -> tuple[str | None, str | None]:
        """The values of ``key`` and ``other`` (``None`` where absent), in one call: the
        ``traceparent`` and ``tracestate`` a tracing middleware reads on every message."""
        data = self._data
        return data.get(key), data.get(other)

    def __delitem__(self, key: str) -> None:
        if self._read_only:
            raise ReadOnlyHeaderError(f"header is read-only; cannot delete {key!r}")
        del self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        flag = ", read_only=True" if self._read_only else ""
        return f"Header({self._data!r}{flag})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Header):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, str]:
        return dict(self._data)

    @property
    def local_first(self) -> bool:
        return self._data.get(self.LOCAL_FIRST) == "true"

    @property
    def local_first_disabled(self) -> bool:
        return self._data.get(self.LOCAL_FIRST_DISABLED) == "true"


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise TypeError(f"header keys must be non-empty strings, got {key!r}")
    return key


def _check_value(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"header value of {key!r} must be a string, got {type(value).__name__}")
    return value
