"""`frozen_record`: a frozen dataclass whose methods are written once, here.

`dataclasses.dataclass` writes each class's `__init__`, `__eq__`, `__hash__`, `__repr__`,
`__setattr__` and `__delattr__` as source text and compiles it when the class is created:
some 4 million instructions a frozen class, a third of what a broker start spends before its
listeners are bound, where some 40 such classes are created. A `frozen_record` class is the
same frozen dataclass (`dataclasses.fields`, `replace`, `asdict`, `__match_args__` and slots
work as ever; type checkers see a frozen dataclass) whose methods are the generic ones below,
which read the class's fields instead of being compiled for them; only `__init__` is
compiled, once a class has made `COMPILE_AFTER` instances (a class made a few times costs no
compilation), so building an instance soon costs what a dataclass's does. Comparing and
hashing cost a little more: meant for configuration-like classes and those made now and then,
not for those made per record.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Final, TypeVar, dataclass_transform, overload

__all__ = ["frozen_record", "record"]

T = TypeVar("T")
_MISSING: Any = dataclasses.MISSING


# Instances built by the generic `__init__` before the class's own is compiled: a class made a
# few times (most configuration) never pays for a compilation, one made often soon has its own.
COMPILE_AFTER: Final = 8


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    """The generic `__init__` for a class's first `COMPILE_AFTER` instances; then compiles
    the class's own (`_compiled_init`) and puts it in place."""
    cls = type(self)
    made = cls.__dict__.get("__record_made__")
    if made is None or made < COMPILE_AFTER:  # (None: an undecorated subclass)
        if made is not None:
            cls.__record_made__ = made + 1
        _generic_init(self, *args, **kwargs)
        return
    init = _compiled_init(cls)
    if init is None:  # fields a signature cannot take in order: generic from now on
        cls.__record_made__ = None
        _generic_init(self, *args, **kwargs)
        return
    cls.__init__ = init
    init(self, *args, **kwargs)


def _compiled_init(cls: type) -> Callable[..., None] | None:
    """`__init__` for `cls`'s fields, as `dataclasses` writes it (one `object.__setattr__` a
    field, defaults as parameter defaults, factories called when not given)."""
    ns: dict[str, Any] = {"_record_set_": object.__setattr__, "_record_missing_": _MISSING}
    params, body = ["self"], []
    defaulted = False
    for i, f in enumerate(cls.__record_init__):  # type: ignore[attr-defined]
        value = f.name
        if f.default is not _MISSING:
            ns[f"_record_d{i}_"] = f.default
            params.append(f"{f.name}=_record_d{i}_")
            defaulted = True
        elif f.default_factory is not _MISSING:
            ns[f"_record_f{i}_"] = f.default_factory
            params.append(f"{f.name}=_record_missing_")
            value = f"_record_f{i}_() if {f.name} is _record_missing_ else {f.name}"
            defaulted = True
        elif defaulted:
            return None
        else:
            params.append(f.name)
        body.append(f"_record_set_(self, {f.name!r}, {value})")
    for i, f in enumerate(cls.__record_no_init__):  # type: ignore[attr-defined]
        if f.default_factory is not _MISSING:
            ns[f"_record_n{i}_"] = f.default_factory
            body.append(f"_record_set_(self, {f.name!r}, _record_n{i}_())")
        else:
            ns[f"_record_n{i}_"] = f.default
            body.append(f"_record_set_(self, {f.name!r}, _record_n{i}_)")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    source = f"def __init__({', '.join(params)}) -> None:\n    " + "\n    ".join(body or ["pass"])
    exec(source, ns)
    init: Callable[..., None] = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _generic_init(self: Any, *args: Any, **kwargs: Any) -> None:
    fields: tuple[dataclasses.Field[Any], ...] = type(self).__record_init__
    if len(args) > len(fields):
        raise TypeError(
            f"{type(self).__name__}() takes {len(fields)} positional arguments "
            f"but {len(args)} were given"
        )
    for i, f in enumerate(fields):
        if i < len(args):
            if f.name in kwargs:
                raise TypeError(f"{type(self).__name__}() got multiple values for {f.name!r}")
            value = args[i]
        elif f.name in kwargs:
            value = kwargs.pop(f.name)
        elif f.default is not _MISSING:
            value = f.default
        elif f.default_factory is not _MISSING:
            factory: Callable[[], Any] = f.default_factory  # type: ignore[assignment]
            value = factory()
        else:
            raise TypeError(f"{type(self).__name__}() missing argument: {f.name!r}")
        object.__setattr__(self, f.name, value)
    if kwargs:
        raise TypeError(f"{type(self).__name__}() got unexpected arguments: {sorted(kwargs)}")
    for f in type(self).__record_no_init__:
        made: Callable[[], Any] = f.default_factory
        value = made() if f.default_factory is not _MISSING else f.default
        object.__setattr__(self, f.name, value)
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _compared(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, name) for name in type(self).__record_compare__)


def _eq(self: Any, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _compared(self) == _compared(other)


def _hash(self: Any) -> int:
    return hash(_compared(self))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in type(self).__record_repr__)
    return f"{type(self).__qualname__}({shown})"


def _setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list[Any]:  # pickling a slotted frozen class, as dataclasses does
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=True):
        object.__setattr__(self, f.name, value)


def _parameter(f: dataclasses.Field[Any]) -> str:
    """`name: type = default`, as a signature shows a field (`<factory>` for a factory's)."""
    text = f"{f.name}: {inspect.formatannotation(f.type)}"
    if f.default is not _MISSING:
        return f"{text} = {f.default!r}"
    return f"{text} = <factory>" if f.default_factory is not _MISSING else text


def _make(cls: type[T], slots: bool, frozen: bool = True) -> type[T]:
    own_repr = "__repr__" in cls.__dict__  # kept, as `dataclasses` keeps it
    owns = ("__init__", "__eq__", "__hash__", "__setattr__", "__delattr__")
    for own in owns if frozen else owns[:3]:
        if own in cls.__dict__ and not (own == "__hash__" and cls.__dict__[own] is None):
            raise TypeError(f"{cls.__name__} defines {own}: use a dataclass")
    undocumented = not cls.__dict__.get("__doc__")
    if undocumented:  # else dataclasses asks inspect for a signature (of object.__init__)
        cls.__doc__ = cls.__name__
    made: Any = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=slots)
    fields = dataclasses.fields(made)
    if any(f.hash is not None or f.kw_only is True for f in fields) or any(
        isinstance(f.type, dataclasses.InitVar) or f.type == "InitVar" for f in fields
    ):
        raise TypeError(f"{cls.__name__}: field hash, kw_only and InitVar need a dataclass")
    made.__record_init__ = tuple(f for f in fields if f.init)
    made.__record_made__ = 0
    made.__record_no_init__ = tuple(
        f for f in fields if not f.init and (f.default, f.default_factory) != (_MISSING, _MISSING)
    )
    made.__record_compare__ = tuple(f.name for f in fields if f.compare)
    made.__record_repr__ = tuple(f.name for f in fields if f.repr)
    if undocumented:  # the doc dataclasses gives a class without one: its signature
        made.__doc__ = f"{cls.__name__}({', '.join(map(_parameter, made.__record_init__))})"
    made.__init__ = _init
    made.__eq__ = _eq
    if not own_repr:
        made.__repr__ = _repr
    if frozen:
        made.__hash__ = _hash
        made.__setattr__ = _setattr
        made.__delattr__ = _delattr
    else:  # unhashable, as a dataclass that compares and is not frozen
        made.__hash__ = None
    if slots and frozen:
        made.__getstate__ = _getstate
        made.__setstate__ = _setstate
    params = made.__dataclass_params__  # what `dataclasses` says of the class: as written
    params.init = params.repr = params.eq = True
    params.frozen = frozen
    return made


@overload
def frozen_record(cls: type[T], /) -> type[T]: ...


@overload
def frozen_record(*, slots: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def frozen_record(
    cls: type[T] | None = None, /, *, slots: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """`@dataclass(frozen=True)` (`slots=True` as there), its methods not compiled per class;
    fields with a `hash` of their own are not supported (every compared field is hashed)."""
    if cls is None:
        return lambda c: _make(c, slots)
    return _make(cls, slots)


@overload
def record(cls: type[T], /) -> type[T]: ...


@overload
def record(*, slots: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field,))
def record(
    cls: type[T] | None = None, /, *, slots: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """`@dataclass` (`slots=True` as there): `frozen_record`'s methods, not frozen, for a
    mutable class made a few times (a broker's counters and holders)."""
    if cls is None:
        return lambda c: _make(c, slots, frozen=False)
    return _make(cls, slots, frozen=False)
