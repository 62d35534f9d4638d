"""Typed argument binding by reflection: decoded values back to the declared types.

msgpack loses some of Python's types (a tuple comes back as an array unless it was
sent as one, an Enum travels as its value, a dataclass as a map). A :class:`Binder`
reads a function's signature and type hints **once** and compiles, for each
parameter, a converter (a plain closure) from "what the wire gives" to "what the
function declares". Binding a call then runs only those closures: it never inspects
the signature again.

Rules (``docs/wire-format.md`` has the full table):

* exact types: ``int`` takes an int but not a bool; ``float`` takes a float or an int
  (converted); ``Decimal`` takes a Decimal or an int; ``date`` does not take a
  datetime; ``str`` takes only a str (no parsing, anywhere);
* containers convert their items: ``list[T]`` (from an array or tuple),
  ``tuple[T, ...]``, ``tuple[A, B]`` (exact length), ``set[T]``, ``frozenset[T]``,
  ``dict[K, V]``; unions try an exact type match first, then each member in order;
* ``Enum`` subclasses are looked up by value; dataclasses and ``NamedTuple`` classes
  are built from a map (a sequence for ``NamedTuple``) with their fields converted;
* an unannotated parameter, ``Any``, ``object``, a type variable and any hint that
  cannot be resolved take the value as decoded; any other class takes its instances.

Binding costs time in proportion to the size of the value, whatever it holds and
wherever it is wrong: a converter that fails names the path as the failure unwinds
(it never walks the value again), and a union whose members could both walk the
value remembers, for the length of one call, what each converter made of each
container. A value nested deeper than :data:`~django_htask.engine.codec.MAX_NESTING`
containers is refused.
"""

from __future__ import annotations

import collections.abc as cabc
import contextlib
import dataclasses
import inspect
import logging
import types
import typing
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any, Final, Literal, Union

from .codec import MAX_NESTING
from .errors import ArgumentError, short_path, short_repr, shown

__all__ = ["Binder", "Converter", "compile_converter"]

logger = logging.getLogger(__name__)

#: Turns a decoded value into the declared type, or raises :class:`ArgumentError`.
Converter = Callable[[Any], Any]

#: What one binding remembers, when a union may try several members on one container:
#: ``(converter, id(value)) -> (value, mismatch or None, result, path length)``. The
#: value is kept so that its id cannot be reused while the table lives.
_Seen = dict[tuple[Any, int], tuple[Any, "_Mismatch | None", Any, int]]
#: A compiled converter: ``(value, depth, seen)``, where ``depth`` counts the
#: containers around ``value`` and ``seen`` is None except under such a union.
_Conv = Callable[[Any, int, _Seen | None], Any]

_NoneType: Final = type(None)


def describe(tp: Any) -> str:
    """A type as a reader writes it: ``list[int]``, ``datetime``, ``int | None``."""
    if tp is None or tp is _NoneType:
        return "None"
    if tp is Ellipsis:
        return "..."
    if tp is Any:
        return "Any"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Union or origin is types.UnionType:
        return " | ".join(describe(arg) for arg in args)
    if origin is Literal:
        return f"Literal[{', '.join(repr(arg) for arg in args)}]"
    if origin is not None:
        base = getattr(origin, "__name__", None) or repr(origin)
        if not args:
            return base
        return f"{base}[{', '.join(describe(arg) for arg in args)}]"
    if isinstance(tp, type):
        return tp.__name__
    return repr(tp).removeprefix("typing.")


class _Mismatch(Exception):
    """Raised by converters; the binder turns it into an :class:`ArgumentError`."""

    def __init__(self, expected: str, value: object, detail: str = "") -> None:
        super().__init__(expected)
        self.expected = expected
        self.value = value
        self.detail = detail
        self.path: list[str] = []  # innermost first

    def where(self) -> str:
        return "".join(reversed(self.path))

    def again(self, depth: int) -> _Mismatch:
        """A copy, as it was when its path had ``depth`` parts (paths only grow)."""
        twin = type(self)(self.expected, self.value, self.detail)
        twin.path = self.path[:depth]
        return twin


class _TooDeep(_Mismatch):
    """A container nested deeper than ``MAX_NESTING``: a limit, not a type to try around."""


# -- scalar converters ----------------------------------------------------------------


def _is_int(value: Any) -> bool:
    """An int that is not a bool (msgpack keeps them apart; so do we)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _int_to_float(value: int) -> float:
    try:
        return float(value)
    except OverflowError:
        raise _Mismatch("float", value, "too large for a float") from None


def _scalar(
    name: str,
    accepts: Callable[[Any], bool],
    widens: Callable[[Any], bool] | None = None,
    widen: Callable[[Any], Any] = lambda value: value,
) -> _Conv:
    """The converter of one scalar type, ``name``: a value ``accepts`` is taken as it
    is, one ``widens`` is taken as ``widen`` makes it (an int as a float or a Decimal,
    a bytearray as bytes), anything else is a mismatch."""

    def convert(value: Any, _depth: int, _seen: _Seen | None) -> Any:
        if accepts(value):
            return value
        if widens is not None and widens(value):
            return widen(value)
        raise _Mismatch(name, value)

    return convert


def _instance_of(cls: type[Any]) -> _Conv:
    return _scalar(describe(cls), lambda value: isinstance(value, cls))


_to_none = _scalar("None", lambda value: value is None)

_SCALARS: Final[dict[Any, _Conv]] = {
    int: _scalar("int", _is_int),
    float: _scalar("float", lambda value: isinstance(value, float), _is_int, _int_to_float),
    bool: _scalar("bool", lambda value: value is True or value is False),
    str: _instance_of(str),
    bytes: _scalar(
        "bytes", lambda value: isinstance(value, bytes), lambda v: isinstance(v, bytearray), bytes
    ),
    _NoneType: _to_none,
    datetime: _instance_of(datetime),
    date: _scalar("date", lambda v: isinstance(v, date) and not isinstance(v, datetime)),
    time: _instance_of(time),
    timedelta: _instance_of(timedelta),
    Decimal: _scalar("Decimal", lambda value: isinstance(value, Decimal), _is_int, Decimal),
    uuid.UUID: _instance_of(uuid.UUID),
}

# Hints whose converter returns a value of exactly that type unchanged: the binder
# skips the call when ``type(value) is hint`` (the common case).
_PASS_THROUGH: Final = frozenset(_SCALARS) - {bytes}


# -- containers ---------------------------------------------------------------------

# Converters that call other converters (of containers, dataclasses, NamedTuples, and
# unions holding one): a union with two of them may walk one value twice.
_NESTED: Final[weakref.WeakSet[_Conv]] = weakref.WeakSet()


def _nesting(body: _Conv) -> _Conv:
    """``body``, a converter that calls others, made to use ``seen`` when it is given.

    Under a union that may try several members on one value, each converter then
    converts each container once per binding: a second attempt finds the result (or
    the mismatch) of the first, so the work stays proportional to the value's size.
    """

    def convert(value: Any, depth: int, seen: _Seen | None) -> Any:
        if seen is None:
            return body(value, depth, None)
        key = (body, id(value))
        known = seen.get(key)
        if known is not None:
            _value, err, result, size = known
            if err is not None:
                raise err.again(size)
            return result
        try:
            result = body(value, depth, seen)
        except _Mismatch as err:
            seen[key] = (value, err, None, len(err.path))
            raise
        seen[key] = (value, None, result, 0)
        return result

    _NESTED.add(convert)
    return convert


def _sequence(tp: Any, item: _Conv | None, build: type[Any]) -> _Conv:
    name = describe(tp)
    accepted: tuple[type[Any], ...] = (list, tuple)
    if build is not list and build is not tuple:
        accepted = (list, tuple, set, frozenset)

    def convert(value: Any, depth: int, seen: _Seen | None) -> Any:
        if not isinstance(value, accepted):
            raise _Mismatch(name, value)
        if depth >= MAX_NESTING:
            raise _TooDeep(name, value)
        out: Any = value
        if item is not None:
            out = []
            append = out.append
            inner = depth + 1
            try:
                for x in value:
                    append(item(x, inner, seen))
            except _Mismatch as err:
                ordered = isinstance(value, (list, tuple))
                err.path.append(f"[{len(out)}]" if ordered else "{*}")
                raise
        if type(out) is build:
            return out
        try:
            return build(out)
        except Exception as exc:  # items a set cannot hold (unhashable, signalling NaN)
            raise _Mismatch(name, value, str(exc)) from None

    return convert if item is None else _nesting(convert)


def _positional(
    name: str,
    value: list[Any] | tuple[Any, ...],
    labels: list[str],
    items: list[_Conv | None],
    depth: int,
    seen: _Seen | None,
) -> list[Any]:
    """The items of ``value`` (a ``name``, a container nested ``depth`` deep), each
    converted by its converter in ``items`` (None: kept as it is); a mismatch's path
    gets the item's label (``[0]``, ``.field``)."""
    if depth >= MAX_NESTING:
        raise _TooDeep(name, value)
    inner = depth + 1
    out = []
    for label, conv, item in zip(labels, items, value, strict=False):
        if conv is None:
            out.append(item)
            continue
        try:
            out.append(conv(item, inner, seen))
        except _Mismatch as err:
            err.path.append(label)
            raise
    return out


def _fixed_tuple(tp: Any, items: list[_Conv | None]) -> _Conv:
    name = describe(tp)
    size = len(items)
    labels = [f"[{index}]" for index in range(size)]

    def convert(value: Any, depth: int, seen: _Seen | None) -> Any:
        if not isinstance(value, (list, tuple)):
            raise _Mismatch(name, value)
        if len(value) != size:
            raise _Mismatch(name, value, f"{size} items expected, got {len(value)}")
        return tuple(_positional(name, value, labels, items, depth, seen))

    return convert if all(conv is None for conv in items) else _nesting(convert)


def _entry(conv: _Conv, item: Any, depth: int, seen: _Seen | None, where: str, key: Any) -> Any:
    """``item`` (a key or a value of a mapping) converted; a mismatch's path gets
    ``where`` with the entry's ``key`` shown in it."""
    try:
        return conv(item, depth, seen)
    except _Mismatch as err:
        err.path.append(where % short_repr(key))
        raise


def _mapping(tp: Any, key: _Conv | None, val: _Conv | None) -> _Conv:
    name = describe(tp)

    def convert(value: Any, depth: int, seen: _Seen | None) -> Any:
        if not isinstance(value, Mapping):
            raise _Mismatch(name, value)
        if depth >= MAX_NESTING:
            raise _TooDeep(name, value)
        if key is None and val is None:
            return value if type(value) is dict else dict(value)
        inner = depth + 1
        out = {}
        for k, v in value.items():
            if key is not None:
                k = _entry(key, k, inner, seen, " key %s", k)  # noqa: PLW2901
            if val is not None:
                v = _entry(val, v, inner, seen, "[%s]", k)  # noqa: PLW2901
            try:
                out[k] = v
            except TypeError as exc:  # a key converted to something unhashable
                raise _Mismatch(name, value, f"key {short_repr(k)}: {exc}") from None
        return out

    return convert if key is None and val is None else _nesting(convert)


def _union(tp: Any, members: tuple[Any, ...], memo: dict[Any, _Conv | None]) -> _Conv | None:
    name = describe(tp)
    convs: list[_Conv] = []
    exact: dict[type[Any], _Conv] = {}
    for member in members:
        conv = _compile(member, memo)
        if conv is None:
            return None  # a member takes anything: so does the union
        convs.append(conv)
        if isinstance(member, type) and typing.get_origin(member) is None:
            exact.setdefault(member, conv)
    # With two members that walk into a value, a mismatch deep down would make each
    # level try both, and the work double per level: remember results instead.
    remember = sum(conv in _NESTED for conv in convs) >= 2

    def convert(value: Any, depth: int, seen: _Seen | None) -> Any:
        conv = exact.get(type(value))
        if conv is not None:
            return conv(value, depth, seen)
        if seen is None and remember:
            seen = {}
        inside: list[_Mismatch] = []  # from members that took the value's shape
        for conv in convs:
            try:
                return conv(value, depth, seen)
            except _TooDeep:
                raise
            except _Mismatch as err:
                if err.path:
                    inside.append(err)
        if len(inside) == 1:  # only one member got into the value: its path says more
            raise inside[0]
        raise _Mismatch(name, value)

    if any(conv in _NESTED for conv in convs):
        _NESTED.add(convert)
    return convert


def _literal(tp: Any, allowed: tuple[Any, ...]) -> _Conv:
    name = describe(tp)

    def matches(value: Any, choice: Any) -> Any:
        if isinstance(choice, Enum):
            if isinstance(value, type(choice)) and value is choice:
                return value
            if not isinstance(value, bool) and type(choice)(value) is choice:
                return choice
        elif type(value) is type(choice) and value == choice:
            return value
        return _NO_MATCH

    def convert(value: Any, _depth: int, _seen: _Seen | None) -> Any:
        for choice in allowed:
            try:
                found = matches(value, choice)
            except Exception:  # not a value of that Enum; a comparison that refuses
                continue
            if found is not _NO_MATCH:
                return found
        raise _Mismatch(name, value)

    return convert


_NO_MATCH: Final = object()


def _enum(cls: type[Enum]) -> _Conv:
    name = cls.__name__
    bool_values = any(isinstance(member.value, bool) for member in cls)
    choices = ", ".join(short_repr(member.value) for member in list(cls)[:6])
    if len(cls) > 6:
        choices += ", ..."

    def convert(value: Any, _depth: int, _seen: _Seen | None) -> Any:
        if isinstance(value, cls):
            return value
        if not (isinstance(value, bool) and not bool_values):
            # ValueError or TypeError usually; a value that cannot be compared with
            # the members' (a signalling NaN) or a class's own _missing_ may raise more.
            with contextlib.suppress(Exception):
                return cls(value)
        raise _Mismatch(name, value, f"not one of its values: {choices}")

    return convert


def _field_hints(cls: type[Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception as exc:
        logger.warning(
            "type hints of %s cannot be resolved (%s); its fields take values as decoded",
            cls.__qualname__,
            exc,
            extra={"action": "binding.unresolved_hints"},
        )
        return {}


def _dataclass(cls: type[Any], memo: dict[Any, _Conv | None]) -> _Conv:
    name = cls.__name__
    fields: list[tuple[str, _Conv | None, bool]] = []
    known: set[str] = set()

    def convert(value: Any, depth: int, seen: _Seen | None) -> Any:
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise _Mismatch(name, value, "a dataclass is sent as a map of its fields")
        if depth >= MAX_NESTING:
            raise _TooDeep(name, value)
        for key in value:
            if key not in known:
                raise _Mismatch(name, value, f"unexpected field {short_repr(key)}")
        inner = depth + 1
        kwargs = {}
        for field, conv, required in fields:
            if field in value:
                item = value[field]
                if conv is not None:
                    try:
                        item = conv(item, inner, seen)
                    except _Mismatch as err:
                        err.path.append(f".{field}")
                        raise
                kwargs[field] = item
            elif required:
                raise _Mismatch(name, value, f"missing field {field!r}")
        try:
            return cls(**kwargs)
        except Exception as exc:
            raise _Mismatch(name, value, f"{type(exc).__name__}: {exc}") from None

    nested = memo[cls] = _nesting(convert)  # before the fields: a recursive one finds itself
    hints = _field_hints(cls)
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        required = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        fields.append((field.name, _compile(hints.get(field.name, Any), memo), required))
        known.add(field.name)
    return nested


def _named_tuple(cls: type[Any], memo: dict[Any, _Conv | None]) -> _Conv:
    name = cls.__name__
    names: tuple[str, ...] = cls._fields
    labels = [f".{field}" for field in names]
    required = len(names) - len(getattr(cls, "_field_defaults", ()))
    items: list[_Conv | None] = []

    def convert(value: Any, depth: int, seen: _Seen | None) -> Any:
        if isinstance(value, cls):
            return value
        if not isinstance(value, (list, tuple)):
            raise _Mismatch(name, value)
        if not required <= len(value) <= len(names):
            raise _Mismatch(name, value, f"{len(names)} items expected, got {len(value)}")
        out = _positional(name, value, labels, items, depth, seen)
        try:
            return cls(*out)
        except Exception as exc:
            raise _Mismatch(name, value, f"{type(exc).__name__}: {exc}") from None

    nested = memo[cls] = _nesting(convert)
    hints = _field_hints(cls)
    items.extend(_compile(hints.get(field, Any), memo) for field in names)
    return nested


# -- the compiler -------------------------------------------------------------------

_LIST_ORIGINS: Final = frozenset(
    {list, cabc.Sequence, cabc.MutableSequence, cabc.Iterable, cabc.Collection}
)
_SET_ORIGINS: Final = frozenset({set, cabc.Set, cabc.MutableSet})
_MAP_ORIGINS: Final = frozenset({dict, cabc.Mapping, cabc.MutableMapping})


def compile_converter(tp: Any) -> Converter | None:
    """The converter for a type hint, or ``None`` when values pass as decoded.

    The converter raises :class:`ArgumentError` naming where the value is wrong.
    """
    conv = _compile(tp, {})
    if conv is None:
        return None
    expects = describe(tp)

    def convert(value: Any) -> Any:
        try:
            return conv(value, 0, None)
        except _Mismatch as err:
            raise ArgumentError(f"expects {expects}: {_mismatch_text('value', err)}") from None

    return convert


def _compile(tp: Any, memo: dict[Any, _Conv | None]) -> _Conv | None:
    try:
        if tp in memo:
            return memo[tp]
    except TypeError:  # an unhashable hint: compile it every time
        pass
    conv = _compile_new(tp, memo)
    with contextlib.suppress(TypeError):
        memo[tp] = conv
    return conv


def _compile_new(tp: Any, memo: dict[Any, _Conv | None]) -> _Conv | None:
    if tp is Any or tp is object or tp is inspect.Parameter.empty:
        return None
    if tp is None:
        return _to_none
    if isinstance(tp, typing.NewType):
        return _compile(tp.__supertype__, memo)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _compile(args[0], memo)
    if origin is Union or origin is types.UnionType:
        return _union(tp, args, memo)
    if origin is Literal:
        return _literal(tp, args)
    if origin in _LIST_ORIGINS:
        return _sequence(tp, _compile(args[0], memo) if args else None, list)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _sequence(tp, _compile(args[0], memo), tuple)
        if args == ((),):  # typing.Tuple[()]
            args = ()
        return _fixed_tuple(tp, [_compile(arg, memo) for arg in args])
    if origin in _SET_ORIGINS or origin is frozenset:
        item = _compile(args[0], memo) if args else None
        return _sequence(tp, item, frozenset if origin is frozenset else set)
    if origin in _MAP_ORIGINS:
        key = _compile(args[0], memo) if args else None
        val = _compile(args[1], memo) if len(args) > 1 else None
        return _mapping(tp, key, val)
    if origin is not None:
        return _instance_of(origin) if isinstance(origin, type) else None
    scalar = _SCALARS.get(tp)
    if scalar is not None:
        return scalar
    if not isinstance(tp, type):
        return None  # a TypeVar or another typing construct: as decoded
    if tp is list or tp is tuple or tp is set or tp is frozenset:
        return _sequence(tp, None, tp)
    if tp is dict:
        return _mapping(tp, None, None)
    if issubclass(tp, Enum):
        return _enum(tp)
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, memo)
    if issubclass(tp, tuple) and hasattr(tp, "_fields"):
        return _named_tuple(tp, memo)
    return _instance_of(tp)


def _pass_through(tp: Any) -> type[Any] | None:
    """The type a converter returns unchanged: the binder skips calling it."""
    if tp in _PASS_THROUGH or (isinstance(tp, type) and issubclass(tp, Enum)):
        return tp  # type: ignore[no-any-return]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp
    return None


# -- the binder ---------------------------------------------------------------------

_Spec = tuple[type[Any] | None, _Conv | None]  # (pass-through type, converter)
_KEYWORD: Final = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_POSITIONAL: Final = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _resolve_hints(fn: Callable[..., Any], sig: inspect.Signature, name: str) -> dict[str, Any]:
    """``typing.get_type_hints``; if that fails, parameter by parameter (bad ones skipped)."""
    try:
        return typing.get_type_hints(fn)
    except Exception:  # fall back to one parameter at a time
        pass
    globalns = getattr(inspect.unwrap(fn), "__globals__", {})
    hints: dict[str, Any] = {}
    for param in sig.parameters.values():
        if param.annotation is inspect.Parameter.empty:
            continue
        holder = types.SimpleNamespace(__annotations__={param.name: param.annotation})
        try:
            hints[param.name] = typing.get_type_hints(holder, globalns=globalns)[param.name]
        except Exception as exc:  # unresolvable: take the value as decoded
            logger.warning(
                "%s() parameter %r: type hint %r cannot be resolved (%s: %s); "
                "the value is passed as decoded",
                name,
                param.name,
                param.annotation,
                type(exc).__name__,
                exc,
                extra={"action": "binding.unresolved_hint"},
            )
    return hints


def _needed(
    npos: int, pos_required: list[tuple[int, str, bool]], kw_required: list[str]
) -> tuple[frozenset[str] | None, ...]:
    """What must come by keyword when ``count`` values came by position, for each
    ``count`` up to ``npos`` (the last entry also serves any longer call); None: a
    positional-only parameter is missing."""
    needed: list[frozenset[str] | None] = []
    for count in range(npos + 1):
        later = [(name, po) for index, name, po in pos_required if index >= count]
        if any(po for _name, po in later):
            needed.append(None)
        else:
            needed.append(frozenset([name for name, _po in later] + kw_required))
    return tuple(needed)


class Binder:
    """Binds decoded ``args`` / ``kwargs`` to one function's declared parameter types.

    Built once per function (the registry caches it); :meth:`bind` then runs only the
    precompiled converters.
    """

    __slots__ = (
        "_all_exact",
        "_defaults",
        "_expects",
        "_fast",
        "_kw",
        "_kw_required",
        "_kw_types",
        "_needed",
        "_npos",
        "_pos",
        "_pos_names",
        "_pos_required",
        "_returns",
        "_var_kw",
        "_var_pos",
        "fn",
        "name",
    )

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or f"{fn.__module__}:{fn.__qualname__}"
        sig = inspect.signature(fn)
        hints = _resolve_hints(fn, sig, self.name)
        memo: dict[Any, _Conv | None] = {}
        pos: list[_Spec] = []
        pos_names: list[str] = []
        pos_required: list[tuple[int, str, bool]] = []
        kw: dict[str, tuple[type[Any] | None, _Conv | None, int]] = {}
        kw_required: list[str] = []
        self._expects: dict[str, str] = {}
        self._var_pos: _Spec | None = None
        self._var_kw: _Spec | None = None
        self._defaults = {
            p.name: p.default
            for p in sig.parameters.values()
            if p.default is not inspect.Parameter.empty
        }
        for param in sig.parameters.values():
            fast, conv = self._converter(param.name, hints.get(param.name, Any), memo)
            required = param.default is inspect.Parameter.empty
            if param.kind in _POSITIONAL:
                index = len(pos)
                pos.append((fast, conv))
                pos_names.append(param.name)
                if required:
                    positional_only = param.kind is inspect.Parameter.POSITIONAL_ONLY
                    pos_required.append((index, param.name, positional_only))
                if param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
                    kw[param.name] = (fast, conv, index)
            elif param.kind is inspect.Parameter.KEYWORD_ONLY:
                kw[param.name] = (fast, conv, -1)
                if required:
                    kw_required.append(param.name)
            elif param.kind is inspect.Parameter.VAR_POSITIONAL:
                self._var_pos = (fast, conv)
                pos_names.append(param.name)
            else:
                self._var_kw = (fast, conv)
                self._expects["**"] = param.name
        self._returns = self._return_converter(hints.get("return", Any), memo)
        self._pos = tuple(pos)
        self._pos_names = tuple(pos_names)
        self._npos = len(pos)
        self._pos_required = tuple(pos_required)
        self._kw = kw
        self._kw_required = tuple(kw_required)
        # The common case costs one C-level comparison: when every positional value
        # already has its parameter's type, ``tuple(map(type, args))`` equals this.
        self._fast: dict[int, tuple[type[Any] | None, ...]] = {}
        self._needed = _needed(len(pos), pos_required, kw_required)
        # Keyword-capable parameters whose converter returns a value of this exact type
        # unchanged: a keyword value of that type passes as it is.
        self._kw_types = {key: fast for key, (fast, _conv, _index) in kw.items() if fast}
        # (Required positional parameters come first: Python has no other order.)
        exact = tuple(fast for fast, _conv in pos)
        self._all_exact = exact if None not in exact else None
        if None not in exact:
            for count in range(len(pos_required), len(pos) + 1):
                self._fast[count] = exact[:count]

    def __repr__(self) -> str:
        return f"<Binder {self.name}>"

    def _converter(
        self, param: str, hint: Any, memo: dict[Any, _Conv | None]
    ) -> tuple[type[Any] | None, _Conv | None]:
        """The converter of parameter ``param`` (None: the value as decoded) and the type
        it passes unchanged (None: none); what it expects goes to ``_expects``. A hint
        no converter can be made for is logged, and its value passed as decoded."""
        try:
            conv = _compile(hint, memo)
            fast = _pass_through(hint) if conv is not None else None
            self._expects[param] = describe(hint)
        except Exception as exc:  # a hint no converter can be made for
            logger.warning(
                "%s() parameter %r: no converter for type hint %r (%s: %s); "
                "the value is passed as decoded",
                self.name,
                param,
                hint,
                type(exc).__name__,
                exc,
                extra={"action": "binding.unusable_hint"},
            )
            memo.clear()  # it may hold a half-built converter
            self._expects[param] = "Any"
            return None, None
        return fast, conv

    def _return_converter(self, hint: Any, memo: dict[Any, _Conv | None]) -> _Conv | None:
        """The converter of the declared return type (None: the value as decoded, also
        for a hint no converter can be made for, which is logged)."""
        try:
            conv = _compile(hint, memo)
        except Exception as exc:
            logger.warning(
                "%s() return type hint %r: no converter (%s: %s); its result is read as decoded",
                self.name,
                hint,
                type(exc).__name__,
                exc,
                extra={"action": "binding.unusable_hint"},
            )
            return None
        self._expects["return"] = describe(hint)
        return conv

    def result(self, value: Any) -> Any:
        """A decoded return value converted to the function's declared return type
        (unannotated: as it is); ArgumentError naming where it does not fit."""
        conv = self._returns
        if conv is None:
            return value
        try:
            return conv(value, 0, None)
        except (_Mismatch, RecursionError) as err:
            head = f"{self.name}() returns {self._expects['return']}"
            if isinstance(err, RecursionError):
                raise ArgumentError(
                    f"{head}: its result nests too deeply for the stack left"
                ) from None
            raise ArgumentError(f"{head}: {_mismatch_text('result', err)}") from None

    def bind(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Convert ``args`` / ``kwargs`` to the declared types; raise ArgumentError."""
        # The usual call: every parameter by position, each value already of its type.
        if (
            not kwargs
            and type(args) is list
            and len(args) == self._npos
            and tuple(map(type, args)) == self._all_exact
            and not self._kw_required
        ):
            return tuple(args), {}
        if (
            type(args) is not list
            and type(args) is not tuple
            and not isinstance(args, (list, tuple))
        ):
            raise ArgumentError(f"{self.name}() args must be a list or tuple, got {shown(args)}")
        count = len(args)
        if not count:
            bound: tuple[Any, ...] = ()
        else:
            fast = self._fast.get(count)
            if fast is not None and tuple(map(type, args)) == fast:
                bound = tuple(args)
            else:
                bound = self._bind_positional(args, count)
        out_kw = self._bind_keywords(kwargs, count) if kwargs else {}
        needed = self._needed[min(count, self._npos)]
        if needed is None or (needed and not needed.issubset(out_kw)):
            self._check_missing(count, out_kw)
        return bound, out_kw

    def argument(self, param: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The value the named parameter ``param`` takes in a call bound by :meth:`bind`
        (``args``, ``kwargs``: what it returned): given, or its default. LookupError
        naming it when the function has no such parameter (or it is ``*args`` or
        ``**kwargs``)."""
        named = self._pos_names[: self._npos]
        if param not in self._kw and param not in named:
            raise LookupError(f"{self.name}() has no parameter {param!r}")
        if param in self._kw and param in kwargs:
            return kwargs[param]
        index = named.index(param) if param in named else len(args)
        if index < len(args):
            return args[index]
        return self._defaults[param]

    def check_later(
        self, args: Sequence[Any], kwargs: Mapping[str, Any] | None, later: Iterable[str]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Check a call whose parameters ``later`` get their values afterwards (the
        results of the tasks it runs after): each must be a parameter that takes a
        keyword and that the call does not give; the call's own values must bind, as
        :meth:`bind` does; ArgumentError naming what does not. Returns them bound
        (``later`` left out)."""
        count = len(args)
        for name in later:
            spec = self._kw.get(name)
            if spec is None:
                raise ArgumentError(
                    f"{self.name}() has no parameter {short_repr(name)} that can receive a "
                    "result by name"
                )
            if 0 <= spec[2] < count or (kwargs and name in kwargs):
                raise ArgumentError(
                    f"{self.name}() parameter {name!r} is given a value and would receive "
                    "a result too"
                )
        bound = self._bind_positional(args, count) if count else ()
        out_kw = self._bind_keywords(kwargs, count) if kwargs else {}
        self._check_missing(count, {**out_kw, **dict.fromkeys(later)})
        return bound, out_kw

    def _bind_positional(self, args: Sequence[Any], count: int) -> tuple[Any, ...]:
        npos = self._npos
        if count > npos and self._var_pos is None:
            raise ArgumentError(
                f"{self.name}() takes {npos} positional argument{'s' * (npos != 1)} "
                f"but {count} {'was' if count == 1 else 'were'} given"
            )
        out: list[Any] = []
        append = out.append
        try:
            for (fast, conv), value in zip(self._pos, args):  # noqa: B905 - args may be longer
                append(value if conv is None or type(value) is fast else conv(value, 0, None))
            if count > npos:
                fast, conv = self._var_pos  # type: ignore[misc]
                for value in args[npos:]:
                    append(value if conv is None or type(value) is fast else conv(value, 0, None))
        except (_Mismatch, RecursionError) as err:
            index = len(out)
            pname = self._pos_names[min(index, len(self._pos_names) - 1)]
            where = f"{pname}[{index - npos}]" if index >= npos else pname
            raise self._error(pname, where, err) from None
        return tuple(out)

    def _bind_keywords(self, kwargs: Mapping[str, Any], count: int) -> dict[str, Any]:
        if type(kwargs) is not dict and not isinstance(kwargs, Mapping):
            raise ArgumentError(f"{self.name}() kwargs must be a map, got {shown(kwargs)}")
        types = self._kw_types
        for key, value in kwargs.items():
            if types.get(key) is not type(value):
                break
        else:  # every value already has its type: only a clash with a positional is left
            if not count or kwargs.keys().isdisjoint(self._pos_names[:count]):
                return dict(kwargs)
        specs = self._kw
        out_kw: dict[str, Any] = {}
        for key, value in kwargs.items():
            spec = specs.get(key)
            if spec is None:
                out_kw[key] = self._extra_keyword(key, value)
                continue
            fast, conv, index = spec
            if 0 <= index < count:
                raise ArgumentError(f"{self.name}() got multiple values for argument {key!r}")
            if conv is None or type(value) is fast:
                out_kw[key] = value
                continue
            out_kw[key] = self._convert(conv, value, key, key)
        return out_kw

    def _convert(self, conv: _Conv, value: Any, param: str, where: str) -> Any:
        try:
            return conv(value, 0, None)
        except (_Mismatch, RecursionError) as err:
            raise self._error(param, where, err) from None

    def _extra_keyword(self, key: Any, value: Any) -> Any:
        if type(key) is not str:
            raise ArgumentError(f"{self.name}() keywords must be str, got {shown(key)}")
        if self._var_kw is None:
            if key in self._pos_names:
                raise ArgumentError(
                    f"{self.name}() got positional-only argument {key!r} as a keyword"
                )
            raise ArgumentError(
                f"{self.name}() got an unexpected keyword argument {short_repr(key)}"
            )
        fast, conv = self._var_kw
        if conv is None or type(value) is fast:
            return value
        varkw = self._expects["**"]
        return self._convert(conv, value, varkw, f"{varkw}[{short_repr(key)}]")

    def _check_missing(self, count: int, out_kw: dict[str, Any]) -> None:
        missing = [
            name
            for index, name, positional_only in self._pos_required
            if index >= count and (positional_only or name not in out_kw)
        ]
        missing += [name for name in self._kw_required if name not in out_kw]
        if missing:
            names = ", ".join(repr(name) for name in missing)
            plural = "s" * (len(missing) > 1)
            raise ArgumentError(f"{self.name}() missing required argument{plural}: {names}")

    def _error(self, param: str, where: str, err: _Mismatch | RecursionError) -> ArgumentError:
        head = f"{self.name}() parameter {param!r} expects"
        if isinstance(err, RecursionError):  # the caller's own stack was nearly full
            return ArgumentError(
                f"{head} {self._expects.get(param, '?')}: {where} nests too deeply for the "
                "stack left to this thread"
            )
        if not err.path and where == param and not isinstance(err, _TooDeep):
            return ArgumentError(f"{head} {err.expected}, got {_got(err)}")
        return ArgumentError(
            f"{head} {self._expects.get(param, '?')}: {_mismatch_text(where, err)}"
        )


def _got(err: _Mismatch) -> str:
    """The value a mismatch names, and why it does not fit if that says more."""
    detail = err.detail if len(err.detail) <= 200 else f"{err.detail[:200]}..."
    return f"{shown(err.value)} ({detail})" if detail else shown(err.value)


def _mismatch_text(where: str, err: _Mismatch) -> str:
    """``where[2].x expects int, got str 'a'``: what failed, at which path below ``where``."""
    path = where + err.where()
    if isinstance(err, _TooDeep):
        return f"containers nest deeper than {MAX_NESTING} levels at {short_path(path)}"
    return f"{path} expects {err.expected}, got {_got(err)}"
