"""The wire format of a task: ``[name, args, kwargs]`` in msgpack, with ext types.

A task travels as a msgpack array of three items: the registered name (a string),
the positional arguments (an array) and the keyword arguments (a map with string
keys). Values use msgpack's native types, plus the ext types below for the Python
values msgpack has no type for. ``docs/wire-format.md`` gives the byte layouts.

====  ==================  =============================================================
code  Python type         payload
====  ==================  =============================================================
 -1   aware datetime      msgpack's standard timestamp (4, 8 or 12 bytes); decoded as
                          an aware datetime in UTC (the instant, not the zone, travels)
  1   naive datetime      int64 BE microseconds since 1970-01-01T00:00 (8 bytes)
  2   date                int32 BE days since 1970-01-01 (4 bytes)
  3   time (naive)        int64 BE microseconds since midnight (8 bytes)
  4   timedelta           int64 BE microseconds (8 bytes)
  5   Decimal             ``str(value)`` in ASCII
  6   UUID                the 16 bytes of the UUID
  7   tuple               a msgpack array of the items
  8   set                 a msgpack array of the items
  9   frozenset           a msgpack array of the items
====  ==================  =============================================================

Values nest at most :data:`MAX_NESTING` containers deep (lists, maps, tuples, sets,
dataclasses), tuples, sets and frozensets at most :data:`MAX_DEPTH`.

Encoding walks the value in Python only to look for what msgpack would pack but a
decoder refuses (map keys that are neither str nor bytes, raw ext values, nesting past
the limit): msgpack packs native values and aware datetimes in C and calls a hook only
for the others. When it fails, a second, slow walk finds the first bad value and names
its path (``kwargs["when"][2]``).

Decoding checks the size first, keeps msgpack's limits (``max_*_len``,
``strict_map_key``), limits nesting, and turns every failure into
:class:`PayloadError`, so garbage can neither crash, hang nor balloon memory.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any, Final

import msgpack

from .errors import PayloadError, short_path, shown

__all__ = [
    "DEFAULT_MAX_SIZE",
    "EXT_DATE",
    "EXT_DECIMAL",
    "EXT_FROZENSET",
    "EXT_NAIVE_DATETIME",
    "EXT_SET",
    "EXT_TIME",
    "EXT_TIMEDELTA",
    "EXT_TIMESTAMP",
    "EXT_TUPLE",
    "EXT_UUID",
    "MAX_DEPTH",
    "MAX_NESTING",
    "decode_call",
    "decode_result",
    "encode_call",
    "encode_result",
]

#: Default limit on the size of an encoded task, in bytes (1 MiB).
DEFAULT_MAX_SIZE: Final = 1 << 20
#: How deeply tuples, sets and frozensets (ext types holding values) may nest.
MAX_DEPTH: Final = 32
#: How deeply containers of any kind (lists, maps, tuples, sets, dataclasses) may nest
#: in one argument: ``[[1]]`` is 2 levels. The binder keeps to the same limit.
MAX_NESTING: Final = 100

#: msgpack's standard timestamp: aware datetimes.
EXT_TIMESTAMP: Final = -1
EXT_NAIVE_DATETIME: Final = 1
EXT_DATE: Final = 2
EXT_TIME: Final = 3
EXT_TIMEDELTA: Final = 4
EXT_DECIMAL: Final = 5
EXT_UUID: Final = 6
EXT_TUPLE: Final = 7
EXT_SET: Final = 8
EXT_FROZENSET: Final = 9

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_UINT64_MAX: Final = (1 << 64) - 1
_US: Final = 1_000_000
_DAY_US: Final = 86_400 * _US
_EPOCH: Final = datetime(1970, 1, 1)
_EPOCH_UTC: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORDINAL: Final = _EPOCH.toordinal()
_ONE_US: Final = timedelta(microseconds=1)

_Q = struct.Struct(">q")
_I = struct.Struct(">i")


def _named(name: str) -> str:
    """A function name as messages start with it, cut if it is absurdly long."""
    return name if len(name) <= 100 else f"{name[:100]}..."


class _Refused(TypeError):
    """A value the wire format cannot carry; the slow walk turns it into a PayloadError."""


# -- encoding -----------------------------------------------------------------------


def _ext(code: int, data: bytes) -> msgpack.ExtType:
    # ExtType's own constructor re-validates in Python; these values are known good.
    return tuple.__new__(msgpack.ExtType, (code, data))


def _enc_datetime(value: datetime) -> msgpack.ExtType | msgpack.Timestamp:
    # Exact aware datetimes never get here: msgpack packs them itself (datetime=True).
    if value.tzinfo is None:
        return _ext(EXT_NAIVE_DATETIME, _Q.pack((value - _EPOCH) // _ONE_US))
    if value.utcoffset() is None:
        raise _Refused("its tzinfo gives no UTC offset")
    delta = value - _EPOCH_UTC
    return msgpack.Timestamp(delta.days * 86_400 + delta.seconds, delta.microseconds * 1000)


def _enc_date(value: date) -> msgpack.ExtType:
    return _ext(EXT_DATE, _I.pack(value.toordinal() - _EPOCH_ORDINAL))


def _enc_time(value: time) -> msgpack.ExtType:
    if value.tzinfo is not None:
        raise _Refused("a time with a tzinfo cannot travel; send an aware datetime")
    us = ((value.hour * 60 + value.minute) * 60 + value.second) * _US + value.microsecond
    return _ext(EXT_TIME, _Q.pack(us))


def _enc_timedelta(value: timedelta) -> msgpack.ExtType:
    us = value // _ONE_US
    if not _INT64_MIN <= us <= _INT64_MAX:
        raise _Refused("it is out of range (int64 microseconds, about 292,000 years)")
    return _ext(EXT_TIMEDELTA, _Q.pack(us))


def _enc_decimal(value: Decimal) -> msgpack.ExtType:
    return _ext(EXT_DECIMAL, str(value).encode("ascii"))


def _enc_uuid(value: uuid.UUID) -> msgpack.ExtType:
    return _ext(EXT_UUID, value.bytes)


# Leaf types with an ext code, most derived first (datetime is a date).
_LEAVES: Final[tuple[tuple[type[Any], Callable[[Any], Any]], ...]] = (
    (datetime, _enc_datetime),
    (date, _enc_date),
    (time, _enc_time),
    (timedelta, _enc_timedelta),
    (Decimal, _enc_decimal),
    (uuid.UUID, _enc_uuid),
)
_CONTAINERS: Final[tuple[tuple[type[Any], int], ...]] = (
    (tuple, EXT_TUPLE),
    (frozenset, EXT_FROZENSET),
    (set, EXT_SET),
)
# Subclasses of native types travel as the base type (a str subclass as a str...).
_NATIVE_BASES: Final[tuple[tuple[type[Any], Callable[[Any], Any]], ...]] = (
    (str, str.__str__),
    (int, int.__int__),
    (float, float.__float__),
    (bytes, bytes),
    (bytearray, bytes),
    (memoryview, bytes),
    (list, list),
    (dict, dict),
)
# msgpack's own ext values would travel as they are, unchecked: refused.
_RAW_MSGPACK: Final = (msgpack.ExtType, msgpack.Timestamp)


def _dataclass_map(value: Any) -> dict[str, Any]:
    """A dataclass as the map of what its constructor takes (``init=False`` fields stay)."""
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}


def _container_code(value: Any) -> int:
    """The ext code of a tuple, set or frozenset (or subclass); 0 for anything else."""
    if isinstance(value, Enum):
        return 0
    for base, code in _CONTAINERS:
        if isinstance(value, base):
            return code
    return 0


def _convert_other(value: Any) -> Any:
    """What stands in for a value that is neither native nor an exact ext type."""
    for base, handler in _LEAVES:
        if isinstance(value, base):
            return handler(value)
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dataclass_map(value)
    for base, convert in _NATIVE_BASES:
        if isinstance(value, base):
            return convert(value)
    raise _Refused("its type is not supported")


def _make_default(depth: int) -> Callable[[Any], Any]:
    """msgpack's ``default`` hook for values nested ``depth`` ext containers deep."""

    def default(value: Any) -> Any:
        handler = _EXACT_LEAVES.get(type(value))
        if handler is not None:
            return handler(value)
        code = _EXACT_CONTAINERS.get(type(value)) or _container_code(value)
        if not code:
            return _convert_other(value)
        if depth >= MAX_DEPTH:
            raise _Refused(f"tuples, sets and frozensets nest deeper than {MAX_DEPTH}")
        return _ext(code, _pack(list(value), _DEFAULTS[depth + 1]))

    return default


_EXACT_LEAVES: Final[dict[type[Any], Callable[[Any], Any]]] = dict(_LEAVES)
_EXACT_CONTAINERS: Final[dict[type[Any], int]] = dict(_CONTAINERS)
_DEFAULTS: Final = [_make_default(depth) for depth in range(MAX_DEPTH + 1)]


def _new_packer(default: Callable[[Any], Any]) -> msgpack.Packer:
    # use_bin_type=True is msgpack's default (>= 1.0); datetime=True packs exact aware
    # datetimes as timestamps in C; strict_types sends tuples, subclasses... to default.
    return msgpack.Packer(default=default, strict_types=True, datetime=True)


def _pack(value: Any, default: Callable[[Any], Any]) -> bytes:
    return _new_packer(default).pack(value)


# Idle top-level Packers, reused (building one costs more than packing a small call).
# A Packer is not thread-safe, so each encode_call takes one out of this list and puts
# it back: list.pop and list.append are atomic, and a re-entrant call takes another.
_idle_packers: list[msgpack.Packer] = []


def encode_call(
    name: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    max_size: int = DEFAULT_MAX_SIZE,
) -> bytes:
    """Encode a call of the function registered as ``name`` into msgpack bytes.

    ``args`` is a list or tuple, ``kwargs`` a mapping with str keys (or None). Raises
    :class:`PayloadError` naming the value and its path (``kwargs["when"][2]``) if
    something cannot travel, or if the result is larger than ``max_size`` bytes.
    """
    if type(name) is not str or not name:
        raise PayloadError(f"the function name must be a non-empty str, got {shown(name)}")
    if type(args) is not list:
        if not isinstance(args, (list, tuple)):
            raise PayloadError(f"args must be a list or tuple, got {shown(args)}")
        args = list(args)
    if kwargs is None:
        kwargs = {}
    elif type(kwargs) is not dict:
        if not isinstance(kwargs, Mapping):
            raise PayloadError(f"kwargs must be a mapping, got {shown(kwargs)}")
        kwargs = dict(kwargs)
    for key in kwargs:
        if type(key) is not str:
            raise PayloadError(f"kwargs keys must be str, got {shown(key)}")
    try:
        # msgpack packs any dict key it can, its own ext values unchecked, and nests as
        # deep as its C stack allows; a decoder refuses all three: look before packing.
        if _suspect(args, 0) or (kwargs and _suspect(kwargs.values(), 0)):
            raise _Refused(_SUSPECT)
        data = _packed([name, args, kwargs])
    except Exception as exc:
        raise _explain(_call_items(name, args, kwargs), exc, "the arguments") from None
    if len(data) > max_size:
        raise PayloadError(
            f"{_named(name)}: the encoded call is {len(data)} bytes, over the limit of {max_size}"
        )
    return data


def encode_result(value: Any, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """Encode what a function returned into msgpack bytes: the value alone, with the
    types and limits of an argument (one argument's nesting, the same ext types).

    Raises :class:`PayloadError` naming the value and its path (``result["rows"][2]``)
    if something cannot travel, or naming its type and size if it is larger than
    ``max_size`` bytes."""
    try:
        if _suspect((value,), 0):
            raise _Refused(_SUSPECT)
        data = _packed(value)
    except Exception as exc:
        raise _explain((("result", value),), exc, "the result") from None
    if len(data) > max_size:
        raise PayloadError(
            f"the result ({type(value).__name__}) is {len(data)} bytes encoded, over the "
            f"limit of {max_size}"
        )
    return data


_SUSPECT: Final = "a map key, a raw msgpack ext value or nesting past the limit"


def _packed(value: Any) -> bytes:
    """``value`` packed by an idle top-level packer (one is made if none is idle)."""
    try:
        packer = _idle_packers.pop()
    except IndexError:
        packer = _new_packer(_DEFAULTS[0])
    try:
        return packer.pack(value)  # empties its buffer even on error
    finally:
        _idle_packers.append(packer)


_SCALARS: Final = frozenset(
    {int, str, float, bool, type(None), bytes, datetime, date, time, timedelta, Decimal, uuid.UUID}
)


def _suspect(values: Iterable[Any], nest: int) -> bool:
    """Whether ``values`` (inside ``nest`` containers) hold something a decoder refuses.

    That is a map key that is neither str nor bytes, a raw ext value, or a container
    nested deeper than :data:`MAX_NESTING`. It never goes deeper than that itself.
    """
    for value in values:
        if type(value) in _SCALARS:
            continue
        children: Iterable[Any]
        if isinstance(value, _RAW_MSGPACK):
            return True
        if isinstance(value, Enum):
            if _suspect((value.value,), nest):
                return True
            continue
        if isinstance(value, dict):
            if not all(isinstance(key, (str, bytes)) for key in value):
                return True
            children = value.values()
        elif isinstance(value, (list, tuple, set, frozenset)):
            children = value
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            children = _dataclass_map(value).values()
        else:
            continue
        if nest >= MAX_NESTING or _suspect(children, nest + 1):
            return True
    return False


# -- finding what failed ------------------------------------------------------------


def _explain(items: Iterable[tuple[str, Any]], exc: Exception, what: str) -> PayloadError:
    """The slow path: walk the values (``(path, value)`` pairs) to name the first one
    that cannot travel; ``what`` they are names them if none is found."""
    try:
        for where, item in items:
            try:
                _walk(item, 0, 0, set())
            except _Bad as bad:
                return bad.error(where)
            except RecursionError:  # the caller's own stack was nearly full
                return PayloadError(f"cannot encode the value at {where}: it nests too deeply")
    except _Bad as bad:  # a key of kwargs
        return bad.error("kwargs")
    return PayloadError(f"cannot encode {what}: {type(exc).__name__}: {exc}")


def _call_items(
    name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Iterator[tuple[str, Any]]:
    """``(path, value)`` of the name and each argument, in order; kwargs keys checked."""
    yield "the function name", name
    for index, item in enumerate(args):
        yield f"args[{index}]", item
    for key, item in kwargs.items():
        _check_key(key)
        yield f"kwargs[{_key_repr(key)}]", item


class _Bad(Exception):
    """A value that cannot travel, found by :func:`_walk`; its path grows as it unwinds."""

    def __init__(self, value: object, why: str, *, is_key: bool = False) -> None:
        super().__init__(why)
        self.value = value
        self.why = why
        self.is_key = is_key
        self.path: list[str] = []  # innermost first

    def error(self, top: str) -> PayloadError:
        path = top + "".join(reversed(self.path))
        return _refuse(self.value, f"a key of {path}" if self.is_key else path, self.why)


def _refuse(value: object, path: str, why: str) -> PayloadError:
    return PayloadError(f"cannot encode {shown(value)} at {short_path(path)}: {why}")


def _check_key(key: Any) -> None:
    if not isinstance(key, (str, bytes)):
        raise _Bad(key, "map keys must be str or bytes", is_key=True)
    if isinstance(key, str):
        try:
            key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _Bad(key, f"it is not valid UTF-8 ({exc.reason})", is_key=True) from None


def _walk(value: Any, depth: int, nest: int, active: set[int]) -> None:
    """Raise :class:`_Bad` for the first value under ``value`` that cannot travel.

    ``depth`` counts enclosing tuples, sets and frozensets (ext types), ``nest`` every
    enclosing container. Paths are built only for the value found, as the error unwinds.
    """
    if value is None or isinstance(value, (bool, float, bytes, bytearray, memoryview)):
        return
    if isinstance(value, Enum):
        try:
            _walk(value.value, depth, nest, active)
        except _Bad as bad:
            bad.path.append(".value")
            raise
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _Bad(value, f"it is not valid UTF-8 ({exc.reason})") from None
        return
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _UINT64_MAX:
            raise _Bad(value, "msgpack integers are 64-bit")
        return
    for base, handler in _LEAVES:
        if isinstance(value, base):
            try:
                handler(value)
            except _Refused as exc:
                raise _Bad(value, str(exc)) from None
            return
    if isinstance(value, _RAW_MSGPACK):
        raise _Bad(value, "raw msgpack ext values cannot travel; send the Python value")
    if id(value) in active:
        raise _Bad(value, "it contains itself")
    if nest >= MAX_NESTING:
        raise _Bad(value, f"containers nest deeper than {MAX_NESTING} levels")
    items: Iterable[tuple[str, Any]]
    if isinstance(value, (tuple, set, frozenset)):
        if depth >= MAX_DEPTH:
            raise _Bad(value, f"tuples, sets and frozensets nest deeper than {MAX_DEPTH}")
        depth += 1
        if isinstance(value, tuple):
            items = ((f"[{index}]", item) for index, item in enumerate(value))
        else:
            items = (("{*}", item) for item in value)
    elif isinstance(value, list):
        items = ((f"[{index}]", item) for index, item in enumerate(value))
    elif isinstance(value, dict):
        items = _map_items(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = ((f".{key}", item) for key, item in _dataclass_map(value).items())
    else:
        raise _Bad(value, "its type is not supported")
    active.add(id(value))
    try:
        for where, item in items:
            try:
                _walk(item, depth, nest + 1, active)
            except _Bad as bad:
                bad.path.append(where)
                raise
    finally:
        active.discard(id(value))


def _map_items(value: dict[Any, Any]) -> Iterable[tuple[str, Any]]:
    """A map's ``([key], value)`` pairs for :func:`_walk`, each key checked first."""
    for key, item in value.items():
        _check_key(key)
        yield f"[{_key_repr(key)}]", item


def _key_repr(key: str | bytes) -> str:
    if isinstance(key, str):
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            return repr(key)
        return json.dumps(key, ensure_ascii=False)
    return repr(key)


# -- decoding -----------------------------------------------------------------------

_td = timedelta


def _wrong_size(code: int, data: bytes, size: int) -> PayloadError:
    return PayloadError(f"ext type {code} needs a {size}-byte payload, got {len(data)} bytes")


def _make_ext_hook(depth: int) -> Callable[[int, bytes], Any]:
    # msgpack decodes its own timestamps (ext -1) in C: they never reach the hook.
    def ext_hook(code: int, data: bytes) -> Any:
        if code == EXT_NAIVE_DATETIME:
            if len(data) != 8:
                raise _wrong_size(code, data, 8)
            return _EPOCH + _td(0, 0, _Q.unpack(data)[0])
        if code == EXT_DATE:
            if len(data) != 4:
                raise _wrong_size(code, data, 4)
            return date.fromordinal(_I.unpack(data)[0] + _EPOCH_ORDINAL)
        if code == EXT_TIME:
            if len(data) != 8:
                raise _wrong_size(code, data, 8)
            us = _Q.unpack(data)[0]
            if not 0 <= us < _DAY_US:
                raise PayloadError(f"time of {us} microseconds is not within a day")
            seconds, micro = divmod(us, _US)
            minutes, second = divmod(seconds, 60)
            hour, minute = divmod(minutes, 60)
            return time(hour, minute, second, micro)
        if code == EXT_TIMEDELTA:
            if len(data) != 8:
                raise _wrong_size(code, data, 8)
            return _td(0, 0, _Q.unpack(data)[0])
        if code == EXT_DECIMAL:
            return Decimal(data.decode("ascii"))
        if code == EXT_UUID:
            if len(data) != 16:
                raise _wrong_size(code, data, 16)
            return uuid.UUID(bytes=data)
        if code in (EXT_TUPLE, EXT_SET, EXT_FROZENSET):
            if depth >= MAX_DEPTH:
                raise PayloadError(f"tuples, sets and frozensets nest deeper than {MAX_DEPTH}")
            items = _unpack(data, _EXT_HOOKS[depth + 1])
            if type(items) is not list:
                raise PayloadError(f"ext type {code} must hold an array, got {shown(items)}")
            if code == EXT_TUPLE:
                return tuple(items)
            return set(items) if code == EXT_SET else frozenset(items)
        raise PayloadError(f"unknown ext type {code} ({len(data)} bytes)")

    return ext_hook


_EXT_HOOKS: Final = [_make_ext_hook(depth) for depth in range(MAX_DEPTH + 1)]
_EXT_HOOK: Final = _EXT_HOOKS[0]


_unpackb = msgpack.unpackb


def _unpack(data: bytes, ext_hook: Callable[[int, bytes], Any]) -> Any:
    # msgpack's defaults (>= 1.0) are the safe ones: raw=False (str is UTF-8),
    # strict_map_key=True (keys are str or bytes) and every max_*_len = len(data), so a
    # header claiming 4 billion items fails at once instead of allocating.
    return _unpackb(data, timestamp=3, ext_hook=ext_hook)


def decode_call(
    data: bytes | bytearray | memoryview, *, max_size: int = DEFAULT_MAX_SIZE
) -> tuple[str, list[Any], dict[str, Any]]:
    """Decode bytes made by :func:`encode_call` into ``(name, args, kwargs)``.

    Anything that is not a well-formed call no larger than ``max_size`` bytes, or whose
    values nest deeper than :data:`MAX_NESTING`, raises :class:`PayloadError`, never
    another exception.
    """
    if type(data) is not bytes:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise PayloadError(f"a payload must be bytes, got {shown(data)}")
        data = bytes(data)
    if len(data) > max_size:
        raise PayloadError(f"the payload is {len(data)} bytes, over the limit of {max_size}")
    call = _unpack_top(data, "the payload")
    if type(call) is list and len(call) == 3:
        name, args, kwargs = call
        if type(name) is str and name and type(args) is list and type(kwargs) is dict:
            for key in kwargs:
                if type(key) is not str:
                    raise PayloadError(f"{_named(name)}: kwargs keys must be str, got {shown(key)}")
            # Nesting past the limit takes more than MAX_NESTING bytes (a byte a level):
            # small calls, the usual ones, skip the walk.
            if len(data) > MAX_NESTING:
                _check_nesting(name, args, kwargs)
            return name, args, kwargs
    raise _malformed(call)


def decode_result(data: bytes | bytearray | memoryview, *, max_size: int | None = None) -> Any:
    """Decode bytes made by :func:`encode_result` into the value (as decoded: no
    conversion to a declared type). Anything that is not one well-formed value no
    larger than ``max_size`` bytes (None: no limit), or that nests deeper than
    :data:`MAX_NESTING`, raises :class:`PayloadError`, never another exception."""
    if type(data) is not bytes:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise PayloadError(f"a result must be bytes, got {shown(data)}")
        data = bytes(data)
    if max_size is not None and len(data) > max_size:
        raise PayloadError(f"the result is {len(data)} bytes, over the limit of {max_size}")
    value = _unpack_top(data, "the result")
    if len(data) > MAX_NESTING and type(value) in _HOLDERS:
        path = _too_deep(value, 0)
        if path is not None:
            where = short_path("result" + "".join(reversed(path)))
            raise PayloadError(
                f"the result: containers nest deeper than {MAX_NESTING} levels at {where}"
            )
    return value


def _unpack_top(data: bytes, what: str) -> Any:
    """The value ``data`` holds (``what`` it is names it in errors): PayloadError for
    anything msgpack or an ext type refuses."""
    try:
        return _unpackb(data, timestamp=3, ext_hook=_EXT_HOOK)
    except PayloadError:
        raise
    except msgpack.StackError:  # deeper than msgpack's own stack (1,024 levels)
        raise PayloadError(
            f"cannot decode {what} ({len(data)} bytes): "
            f"containers nest deeper than {MAX_NESTING} levels"
        ) from None
    except Exception as exc:
        raise PayloadError(
            f"cannot decode {what} ({len(data)} bytes): {type(exc).__name__}: {exc}"
        ) from exc


# What decoding makes that holds other values.
_HOLDERS: Final = frozenset({list, dict, tuple, set, frozenset})


def _check_nesting(name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Raise PayloadError if a decoded value nests deeper than :data:`MAX_NESTING`."""
    for top, holder in (("args", args), ("kwargs", kwargs)):
        path = _too_deep(holder, -1)  # args itself is not a level: args[0] may be 1
        if path is not None:
            where = short_path(top + "".join(reversed(path)))
            raise PayloadError(
                f"{_named(name)}: containers nest deeper than {MAX_NESTING} levels at {where}"
            )


def _too_deep(value: Any, nest: int) -> list[str] | None:
    """The path (innermost first) under ``value``, a container inside ``nest`` others,
    to a container deeper than :data:`MAX_NESTING`; None if there is none.

    Recursion stops at the limit; a container holding no container costs one C-level
    pass over its items.
    """
    if nest >= MAX_NESTING:
        return []
    is_map = type(value) is dict
    if _HOLDERS.isdisjoint(map(type, value.values() if is_map else value)):
        return None
    pairs: Iterable[tuple[Any, Any]]
    key: Any  # a str or bytes in a map, an index in an array, None in a set
    if is_map:
        pairs = value.items()
    elif type(value) is list or type(value) is tuple:
        pairs = enumerate(value)
    else:
        pairs = ((None, item) for item in value)
    for key, item in pairs:
        if type(item) in _HOLDERS:
            path = _too_deep(item, nest + 1)
            if path is not None:
                if key is None:
                    path.append("{*}")
                elif is_map:
                    path.append(f"[{_key_repr(key)}]")
                else:
                    path.append(f"[{key}]")
                return path
    return None


def _malformed(call: Any) -> PayloadError:
    """What is wrong with a decoded value that is not ``[name, args, kwargs]``."""
    if type(call) is not list or len(call) != 3:
        return PayloadError(f"a call is an array [name, args, kwargs], got {shown(call)}")
    name, args, kwargs = call
    if type(name) is not str or not name:
        return PayloadError(f"a call's name must be a non-empty str, got {shown(name)}")
    if type(args) is not list:
        return PayloadError(f"{_named(name)}: args must be an array, got {shown(args)}")
    return PayloadError(f"{_named(name)}: kwargs must be a map, got {shown(kwargs)}")
