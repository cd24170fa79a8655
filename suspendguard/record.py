"""Frozen records: what ``@dataclass(frozen=True)`` gives, without its start-up cost.

The sleep hook and ``check --dry-run`` run on the suspend path and must start
fast. On the small machines this runs on, importing ``dataclasses`` (it pulls
in ``inspect``, ``ast``, ``dis``, ...) costs about 45 ms and every frozen
dataclass another 1.4 ms (it compiles six methods with ``exec``): more than
the rest of a dry run together. ``@record`` builds the same behaviour from
closures, and type checkers see a frozen dataclass (PEP 681).

Supported: annotated fields in declaration order, plain defaults (use
immutable ones: tuples, frozensets), ``__init__`` by position or keyword,
``__eq__``/``__hash__``/``__repr__`` over the fields, immutability,
``functools.cached_property``, and ``replace()`` / ``fields()`` /
``asdict()`` below. Not supported: inheritance of fields, default factories.
"""

from __future__ import annotations

from collections.abc import Callable

# typing is not imported at run time: it is a noticeable part of start-up,
# and every name from it is needed by the type checker only.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any, TypeVar

    from typing_extensions import dataclass_transform

    T = TypeVar("T")
else:
    def dataclass_transform(**_kwargs: Any) -> Callable[[Any], Any]:
        return lambda f: f

_MISSING = object()
_FIELDS = "__record_fields__"


class FrozenInstanceError(AttributeError):
    """Raised on an attempt to change a record (like dataclasses')."""


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    # The class's own annotations (inspect.get_annotations would import the
    # very module this one exists to avoid).
    names = tuple(cls.__dict__.get("__annotations__", {}))  # noqa: RUF063
    defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
    seen_default = False
    for n in names:
        if n in defaults:
            seen_default = True
        elif seen_default:
            raise TypeError(f"{cls.__name__}: field {n!r} without a default follows one with")
    # Defaults must not stay class attributes shadowing nothing: they are
    # applied by __init__; a class attribute would hide a missing instance value.
    for n in defaults:
        delattr(cls, n)
    name_of = cls.__qualname__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{name_of}() takes {len(names)} positional arguments, "
                            f"{len(args)} given")
        values = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"{name_of}() got an unexpected keyword argument {key!r}")
            if key in values:
                raise TypeError(f"{name_of}() got multiple values for argument {key!r}")
            values[key] = value
        d = self.__dict__
        for n in names:
            if n in values:
                d[n] = values[n]
            elif n in defaults:
                d[n] = defaults[n]
            else:
                raise TypeError(f"{name_of}() missing required argument {n!r}")

    def _key(self: Any) -> tuple[Any, ...]:
        d = self.__dict__
        return tuple(d[n] for n in names)

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(_key(self) == _key(other))

    def __hash__(self: Any) -> int:
        return hash(_key(self))

    def __repr__(self: Any) -> str:
        d = self.__dict__
        return f"{name_of}(" + ", ".join(f"{n}={d[n]!r}" for n in names) + ")"

    def __setattr__(self: Any, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r} of a {name_of}")

    def __delattr__(self: Any, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r} of a {name_of}")

    for fn in (__init__, __eq__, __hash__, __repr__, __setattr__, __delattr__):
        fn.__qualname__ = f"{name_of}.{fn.__name__}"
        setattr(cls, fn.__name__, fn)
    setattr(cls, _FIELDS, names)
    return cls


def fields(obj: Any) -> tuple[str, ...]:
    """The field names of a record (or record class), in declaration order."""
    return tuple(getattr(obj, _FIELDS))


def asdict(obj: Any) -> dict[str, Any]:
    """A record's fields as a dict (not recursive)."""
    return {n: obj.__dict__[n] for n in fields(obj)}


def replace(obj: T, **changes: Any) -> T:
    """A copy of ``obj`` with some fields changed (like dataclasses.replace)."""
    values = asdict(obj)
    for key in changes:
        if key not in values:
            raise TypeError(f"{type(obj).__qualname__} has no field {key!r}")
    values.update(changes)
    return type(obj)(**values)
