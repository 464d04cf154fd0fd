"""``delegated``: a read-only attribute read through an object its owner holds.

Why: a handle exposes what the object it holds owns (``backend.model`` is
``backend.engine.model``, ``stats.cache_hits`` the totals' ``cache_hits``); one line each
instead of a property each, and still read-only.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Generic, TypeVar, overload

__all__ = ["delegated"]

T = TypeVar("T")


class delegated(Generic[T]):
    """``model: delegated[Any] = delegated("engine.model")``: reads ``self.engine.model``."""

    def __init__(self, path: str, doc: str | None = None) -> None:
        self._path = path
        self._get = attrgetter(path)
        self.__doc__ = doc or f"``self.{path}`` (read-only)."
        self._name = path

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> delegated[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return self._get(obj)

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError(f"{self._name} is read-only (it is self.{self._path})")
