"""The wire format: golden vectors, round trips, every error path, fuzzing."""

from __future__ import annotations

import dataclasses
import enum
import math
import random
import struct
import threading
import uuid
from collections import OrderedDict
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_htask.engine import PayloadError, decode_call, encode_call
from django_htask.engine.codec import (
    DEFAULT_MAX_SIZE,
    EXT_DATE,
    EXT_DECIMAL,
    EXT_FROZENSET,
    EXT_NAIVE_DATETIME,
    EXT_SET,
    EXT_TIME,
    EXT_TIMEDELTA,
    EXT_TIMESTAMP,
    EXT_TUPLE,
    EXT_UUID,
    MAX_DEPTH,
    MAX_NESTING,
)

TOKYO = timezone(timedelta(hours=9))

# -- golden vectors ---------------------------------------------------------------------
# The exact bytes of the wire format. docs/wire-format.md shows the same ones; if one of
# these changes, every stored task and every producer in another language breaks.

GOLDEN: list[tuple[str, tuple[str, list[Any], dict[str, Any]], str]] = [
    ("empty call", ("m:f", [], {}), "93a36d3a669080"),
    (
        "integers",
        ("tasks:add", [1, -1, 300, 2**40, -(2**63), 2**64 - 1], {}),
        "93a97461736b733a6164649601ffcd012ccf0000010000000000d38000000000000000"
        "cfffffffffffffffff80",
    ),
    (
        "native types",
        (
            "t:f",
            [None, True, False, 1.5, "hé", b"\x00\xff", [1, [2]], {"a": 1, "b": {"c": None}}],
            {},
        ),
        "93a3743a6698c0c3c2cb3ff8000000000000a368c3a9c40200ff9201910282a16101a16281a163c080",
    ),
    (
        "aware datetimes (timestamp 32, 64, 96)",
        (
            "t:f",
            [
                datetime(2026, 3, 14, 9, 30, 15, tzinfo=UTC),
                datetime(2026, 3, 14, 9, 30, 15, 250_000, tzinfo=UTC),
                datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC),
            ],
            {},
        ),
        "93a3743a6693d6ff69b52aa7d7ff3b9aca0069b52aa7c70cff1dcd6500ffffffffffffffff80",
    ),
    (
        "naive datetime",
        ("t:f", [datetime(2026, 3, 14, 9, 30, 15, 250_000)], {}),
        "93a3743a6691d70100064cf8a216885080",
    ),
    (
        "dates",
        ("t:f", [date(2026, 3, 14), date(1969, 12, 31)], {}),
        "93a3743a6692d6020000502ed602ffffffff80",
    ),
    ("time", ("t:f", [time(9, 30, 15, 250_000)], {}), "93a3743a6691d70300000007f763485080"),
    (
        "timedeltas",
        ("t:f", [timedelta(days=1, microseconds=1), timedelta(seconds=-1)], {}),
        "93a3743a6692d704000000141dd76001d704fffffffffff0bdc080",
    ),
    (
        "decimals",
        ("t:f", [Decimal("12.50"), Decimal("-1E+3")], {}),
        "93a3743a6692c7050531322e3530c705052d31452b3380",
    ),
    (
        "uuid",
        ("t:f", [uuid.UUID("12345678-1234-5678-1234-567812345678")], {}),
        "93a3743a6691d8061234567812345678123456781234567880",
    ),
    ("tuples", ("t:f", [(1, "a"), ()], {}), "93a3743a6692d6079201a161d4079080"),
    (
        "set and frozenset",
        ("t:f", [{1}, frozenset({"x"})], {}),
        "93a3743a6692d5089101c7030991a17880",
    ),
    (
        "keyword arguments",
        (
            "myapp.tasks:send_reminder",
            [42],
            {"when": datetime(2026, 3, 14, 9, 30, tzinfo=UTC), "tags": ("a", "b")},
        ),
        "93b96d796170702e7461736b733a73656e645f72656d696e646572912a82a47768656ed6ff69b52a98"
        "a474616773c7050792a161a162",
    ),
]


@pytest.mark.parametrize(("call", "hex_bytes"), [g[1:] for g in GOLDEN], ids=[g[0] for g in GOLDEN])
def test_golden_vectors(call: tuple[str, list[Any], dict[str, Any]], hex_bytes: str) -> None:
    name, args, kwargs = call
    assert encode_call(name, args, kwargs).hex() == hex_bytes
    decoded = decode_call(bytes.fromhex(hex_bytes))
    assert decoded == call
    assert_same(list(decoded), list(call))


def test_ext_codes_are_fixed() -> None:
    codes = (
        EXT_TIMESTAMP,
        EXT_NAIVE_DATETIME,
        EXT_DATE,
        EXT_TIME,
        EXT_TIMEDELTA,
        EXT_DECIMAL,
        EXT_UUID,
        EXT_TUPLE,
        EXT_SET,
        EXT_FROZENSET,
    )
    assert codes == (-1, 1, 2, 3, 4, 5, 6, 7, 8, 9)


def test_aware_datetimes_travel_as_their_instant_in_utc() -> None:
    tokyo = datetime(2026, 3, 14, 18, 30, 15, tzinfo=TOKYO)
    paris = datetime(2026, 3, 14, 10, 30, 15, tzinfo=ZoneInfo("Europe/Paris"))
    data = encode_call("t:f", [tokyo, paris])
    # the same bytes as the same instant written in UTC
    assert data == encode_call("t:f", [datetime(2026, 3, 14, 9, 30, 15, tzinfo=UTC)] * 2)
    _, (a, b), _ = decode_call(data)
    assert a == tokyo and b == paris
    assert a.tzinfo is UTC and b.tzinfo is UTC


def test_other_producers_timestamps_decode() -> None:
    # msgpack's own encoder (as any other language's) writes aware datetimes as ext -1
    when = datetime(2030, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    data = msgpack.packb(["t:f", [when, msgpack.Timestamp(0, 999)], {}], datetime=True)
    assert decode_call(data) == ("t:f", [when, datetime(1970, 1, 1, tzinfo=UTC)], {})


def test_subclasses_enums_and_dataclasses_travel_as_their_base_value() -> None:
    class Color(enum.Enum):
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    class Name(str):
        pass

    class Point(NamedTuple):
        x: int
        y: int

    @dataclasses.dataclass
    class Box:
        size: int
        tags: tuple[str, ...]

    args = [
        Color.RED,
        Level.HIGH,
        Name("ann"),
        Point(1, 2),
        Box(3, ("a",)),
        OrderedDict(a=1),
        bytearray(b"xy"),
        memoryview(b"z"),
    ]
    _, decoded, _ = decode_call(encode_call("t:f", args))
    assert decoded == ["red", 3, "ann", (1, 2), {"size": 3, "tags": ("a",)}, {"a": 1}, b"xy", b"z"]
    assert [type(v) for v in decoded] == [str, int, str, tuple, dict, dict, bytes, bytes]


def test_nan_and_signed_zero_survive() -> None:
    _, (nan, zero, dnan), _ = decode_call(encode_call("t:f", [math.nan, -0.0, Decimal("NaN")]))
    assert math.isnan(nan)
    assert math.copysign(1.0, zero) == -1.0
    assert dnan.is_nan()


def test_args_may_be_a_tuple_and_kwargs_any_mapping() -> None:
    data = encode_call("t:f", (1, 2), OrderedDict(a=3))
    assert data == encode_call("t:f", [1, 2], {"a": 3})
    assert encode_call("t:f") == encode_call("t:f", [], {}) == encode_call("t:f", (), None)


def test_decode_accepts_bytearray_and_memoryview() -> None:
    data = encode_call("t:f", [1])
    assert decode_call(bytearray(data)) == decode_call(memoryview(data)) == ("t:f", [1], {})


def test_encoding_is_thread_safe() -> None:
    # encode_call reuses msgpack Packers: concurrent calls must never mix their bytes
    expected = {i: encode_call("t:f", [i, (i, str(i)), date(2020, 1, 1)]) for i in range(8)}
    failures: list[int] = []
    start = threading.Barrier(8)

    def work(i: int) -> None:
        start.wait()
        for _ in range(2_000):
            if encode_call("t:f", [i, (i, str(i)), date(2020, 1, 1)]) != expected[i]:
                failures.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures


def test_a_failed_encode_leaves_no_bytes_behind() -> None:
    with pytest.raises(PayloadError):
        encode_call("t:f", ["x" * 100, object()])
    assert encode_call("t:f", [1]) == bytes.fromhex("93a3743a669101" + "80")


# -- round trips (hypothesis) ------------------------------------------------------------

_ZONES: list[tzinfo] = [
    UTC,
    TOKYO,
    timezone(timedelta(hours=-3, minutes=-30)),
    ZoneInfo("Europe/Paris"),
]

_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(),
    # aware datetimes: the UTC instant must be a datetime too (not within a day of the ends)
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from(_ZONES),
    ),
    st.datetimes(),
    st.dates(),
    st.times(),
    st.timedeltas(min_value=timedelta(days=-106_000_000), max_value=timedelta(days=106_000_000)),
    st.decimals(allow_nan=False),
    st.uuids(),
)
_hashable = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.text(), st.dates(), st.uuids(), st.binary()
)

_values = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(), children, max_size=4),
        st.sets(_hashable, max_size=4),
        st.frozensets(_hashable, max_size=4),
    ),
    max_leaves=20,
)


def assert_same(decoded: Any, original: Any) -> None:
    """Equal, and of the same types all the way down (aware datetimes come back in UTC)."""
    if isinstance(original, datetime) and original.utcoffset() is not None:
        assert type(decoded) is datetime and decoded.tzinfo is UTC
        assert decoded == original.astimezone(UTC)
        return
    assert type(decoded) is type(original), (decoded, original)
    if isinstance(original, (list, tuple)):
        assert len(decoded) == len(original)
        for d, o in zip(decoded, original, strict=True):
            assert_same(d, o)
    elif isinstance(original, dict):
        assert decoded.keys() == original.keys()
        for key in original:
            assert_same(decoded[key], original[key])
    elif isinstance(original, Decimal):
        assert str(decoded) == str(original)
    elif isinstance(original, float):
        assert decoded == original and math.copysign(1, decoded) == math.copysign(1, original)
    else:
        assert decoded == original


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.text(min_size=1),
    args=st.lists(_values, max_size=4),
    kwargs=st.dictionaries(st.text(), _values, max_size=4),
)
def test_round_trip(name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    decoded_name, decoded_args, decoded_kwargs = decode_call(encode_call(name, args, kwargs))
    assert decoded_name == name
    assert_same(decoded_args, args)
    assert_same(decoded_kwargs, kwargs)


@given(st.datetimes(timezones=st.sampled_from(_ZONES)))
def test_datetimes_at_the_ends_of_the_range_fail_cleanly(value: datetime) -> None:
    # An aware datetime whose UTC instant is not a datetime (year 0 or 10000) encodes,
    # and decoding says so with a PayloadError rather than anything else.
    data = encode_call("t:f", [value])
    try:
        decoded = decode_call(data)
    except PayloadError:
        assert not datetime.min.replace(tzinfo=UTC) <= value <= datetime.max.replace(tzinfo=UTC)
    else:
        assert_same(decoded[1], [value])


# -- encoding errors: each names the value and its path ---------------------------------


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque>"


@dataclasses.dataclass
class Reminder:
    text: str
    extra: Any = None


class Wrapped(enum.Enum):
    BAD = Opaque()


class NoOffset(tzinfo):
    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None


def _self_containing() -> list[Any]:
    items: list[Any] = [1]
    items.append(items)
    return items


def _nested_tuples(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = (value,)
    return value


def _nested_lists(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


ENCODE_ERRORS: list[tuple[str, list[Any], dict[str, Any], str]] = [
    (
        "unsupported",
        [],
        {"when": [0, 1, Opaque()]},
        'cannot encode Opaque <Opaque> at kwargs["when"][2]: its type is not supported',
    ),
    ("in a map", [{"a": {"b": Opaque()}}], {}, 'at args[0]["a"]["b"]: its type is not supported'),
    ("in a tuple", [(1, (2, Opaque()))], {}, "at args[0][1][1]: its type is not supported"),
    ("in a set", [frozenset({(1, Opaque())})], {}, "at args[0]{*}[1]"),
    (
        "dataclass field",
        [Reminder("x", extra=Opaque())],
        {},
        "at args[0].extra: its type is not supported",
    ),
    ("enum value", [Wrapped.BAD], {}, "at args[0].value: its type is not supported"),
    (
        "int key",
        [],
        {"m": {1: "a"}},
        'cannot encode int 1 at a key of kwargs["m"]: map keys must be str or bytes',
    ),
    ("tuple key", [{(1, 2): "a"}], {}, "at a key of args[0]: map keys must be str or bytes"),
    ("key not UTF-8", [{"\ud800": 1}], {}, "at a key of args[0]: it is not valid UTF-8"),
    ("int too big", [2**64], {}, "at args[0]: msgpack integers are 64-bit"),
    ("int too small", [[-(2**63) - 1]], {}, "at args[0][0]: msgpack integers are 64-bit"),
    ("str not UTF-8", [], {"s": "a\udcff"}, 'at kwargs["s"]: it is not valid UTF-8'),
    ("aware time", [time(1, tzinfo=UTC)], {}, "at args[0]: a time with a tzinfo cannot travel"),
    ("huge timedelta", [timedelta(days=999_999_999)], {}, "at args[0]: it is out of range"),
    (
        "tzinfo without offset",
        [datetime(2020, 1, 1, tzinfo=NoOffset())],
        {},
        "at args[0]: its tzinfo gives no UTC offset",
    ),
    ("contains itself", [_self_containing()], {}, "at args[0][1]: it contains itself"),
    ("tuples too deep", [_nested_tuples(MAX_DEPTH + 1)], {}, f"nest deeper than {MAX_DEPTH}"),
    ("lists too deep", [_nested_lists(2_000)], {}, "containers nest deeper than 100 levels"),
    ("raw ext", [msgpack.ExtType(42, b"")], {}, "at args[0]: raw msgpack ext values cannot travel"),
    ("raw timestamp", [[msgpack.Timestamp(1, 0)]], {}, "at args[0][0]: raw msgpack ext values"),
]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"), [e[1:] for e in ENCODE_ERRORS], ids=[e[0] for e in ENCODE_ERRORS]
)
def test_encode_errors_name_value_and_path(
    args: list[Any], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(PayloadError, match="cannot encode") as info:
        encode_call("t:f", args, kwargs)
    assert message in str(info.value)
    assert len(str(info.value)) < 500


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "message"),
    [
        ("", [], {}, "the function name must be a non-empty str, got str ''"),
        (b"t:f", [], {}, "the function name must be a non-empty str, got bytes"),
        ("a\ud800", [], {}, "at the function name: it is not valid UTF-8"),
        ("t:f", "abc", {}, "args must be a list or tuple, got str 'abc'"),
        ("t:f", {"a": 1}, {}, "args must be a list or tuple, got dict"),
        ("t:f", (x for x in [1]), {}, "args must be a list or tuple, got generator"),
        ("t:f", [], [("a", 1)], "kwargs must be a mapping, got list"),
        ("t:f", [], {1: "a"}, "kwargs keys must be str, got int 1"),
        ("t:f", [], {"\udc00": 1}, "at a key of kwargs: it is not valid UTF-8"),
    ],
)
def test_encode_refuses_malformed_calls(name: Any, args: Any, kwargs: Any, message: str) -> None:
    with pytest.raises(PayloadError) as info:
        encode_call(name, args, kwargs)
    assert message in str(info.value)


def test_encode_enforces_the_size_limit() -> None:
    assert len(encode_call("t:f", ["x" * 100])) == 109
    assert encode_call("t:f", ["x" * 100], max_size=109)
    with pytest.raises(
        PayloadError, match=r"t:f: the encoded call is 109 bytes, over the limit of 108"
    ):
        encode_call("t:f", ["x" * 100], max_size=108)
    with pytest.raises(PayloadError, match=f"over the limit of {DEFAULT_MAX_SIZE}"):
        encode_call("t:f", [b"x" * DEFAULT_MAX_SIZE])


# -- decoding errors ---------------------------------------------------------------------


def _call(*items: bytes) -> bytes:
    """A call ``["t:f", [items...], {}]`` with raw msgpack items."""
    assert len(items) < 16
    return b"\x93\xa3t:f" + bytes([0x90 | len(items)]) + b"".join(items) + b"\x80"


def _ext(code: int, data: bytes) -> bytes:
    return msgpack.packb(msgpack.ExtType(code, data))


DECODE_ERRORS: list[tuple[str, bytes, str]] = [
    ("empty", b"", "cannot decode the payload (0 bytes)"),
    ("truncated", encode_call("t:f", [1, 2])[:-2], "cannot decode the payload"),
    ("extra data", encode_call("t:f") + b"\x00", "cannot decode the payload"),
    ("not UTF-8", b"\x93\xa2\xff\xfe\x90\x80", "cannot decode the payload"),
    ("not an array", msgpack.packb({"a": 1}), "a call is an array [name, args, kwargs], got dict"),
    ("two items", msgpack.packb(["t:f", []]), "a call is an array [name, args, kwargs], got list"),
    (
        "name not str",
        msgpack.packb([1, [], {}]),
        "a call's name must be a non-empty str, got int 1",
    ),
    ("empty name", msgpack.packb(["", [], {}]), "a call's name must be a non-empty str"),
    ("args not array", msgpack.packb(["t:f", {}, {}]), "t:f: args must be an array, got dict"),
    ("kwargs not map", msgpack.packb(["t:f", [], []]), "t:f: kwargs must be a map, got list"),
    (
        "bytes kwarg key",
        msgpack.packb(["t:f", [], {b"k": 1}]),
        "t:f: kwargs keys must be str, got bytes b'k'",
    ),
    ("int map key", _call(b"\x81\x01\x02"), "cannot decode the payload"),
    ("unknown ext", _call(_ext(42, b"abc")), "unknown ext type 42 (3 bytes)"),
    (
        "naive datetime size",
        _call(_ext(EXT_NAIVE_DATETIME, b"\x00" * 4)),
        "ext type 1 needs a 8-byte payload, got 4 bytes",
    ),
    ("date size", _call(_ext(EXT_DATE, b"\x00" * 8)), "ext type 2 needs a 4-byte payload"),
    ("time size", _call(_ext(EXT_TIME, b"\x00")), "ext type 3 needs a 8-byte payload"),
    ("timedelta size", _call(_ext(EXT_TIMEDELTA, b"")), "ext type 4 needs a 8-byte payload"),
    ("uuid size", _call(_ext(EXT_UUID, b"\x00" * 15)), "ext type 6 needs a 16-byte payload"),
    (
        "time past midnight",
        _call(_ext(EXT_TIME, struct.pack(">q", 86_400_000_000))),
        "time of 86400000000 microseconds is not within a day",
    ),
    ("negative time", _call(_ext(EXT_TIME, struct.pack(">q", -1))), "is not within a day"),
    (
        "date out of range",
        _call(_ext(EXT_DATE, struct.pack(">i", 2**31 - 1))),
        "cannot decode the payload",
    ),
    (
        "naive datetime out of range",
        _call(_ext(EXT_NAIVE_DATETIME, struct.pack(">q", 2**63 - 1))),
        "cannot decode the payload",
    ),
    (
        "timestamp out of range",
        _call(msgpack.packb(msgpack.Timestamp(2**40, 0))),
        "cannot decode the payload",
    ),
    ("timestamp size", _call(b"\xc7\x05\xff" + b"\x00" * 5), "cannot decode the payload"),
    ("bad decimal", _call(_ext(EXT_DECIMAL, b"12,5")), "cannot decode the payload"),
    ("decimal not ASCII", _call(_ext(EXT_DECIMAL, "١٢".encode())), "cannot decode the payload"),
    (
        "tuple holding a map",
        _call(_ext(EXT_TUPLE, b"\x80")),
        "ext type 7 must hold an array, got dict",
    ),
    ("tuple holding garbage", _call(_ext(EXT_TUPLE, b"\xc1")), "cannot decode the payload"),
    ("unhashable set items", _call(_ext(EXT_SET, b"\x91\x90")), "cannot decode the payload"),
    (
        "signalling NaN in a set",
        _call(_ext(EXT_FROZENSET, b"\x91" + _ext(EXT_DECIMAL, b"sNaN"))),
        "cannot decode the payload",
    ),
    ("arrays too deep", _call(b"\x91" * 5_000 + b"\xc0"), "containers nest deeper than 100 levels"),
    ("huge array header", b"\x93\xa3t:f\xdd\xff\xff\xff\xff", "cannot decode the payload"),
    ("huge string header", b"\x93\xdb\xff\xff\xff\xff", "cannot decode the payload"),
]


def _deep_ext(depth: int) -> bytes:
    data = b"\x90"
    for _ in range(depth):
        data = _ext(EXT_TUPLE, b"\x91" + data)
    return data


DECODE_ERRORS.append(
    ("tuples too deep", _call(_deep_ext(MAX_DEPTH + 2)), f"nest deeper than {MAX_DEPTH}")
)


@pytest.mark.parametrize(
    ("data", "message"), [e[1:] for e in DECODE_ERRORS], ids=[e[0] for e in DECODE_ERRORS]
)
def test_decode_errors(data: bytes, message: str) -> None:
    with pytest.raises(PayloadError) as info:
        decode_call(data)
    assert message in str(info.value)


def test_decode_nesting_within_the_limit_works() -> None:
    _, [value], _ = decode_call(_call(_deep_ext(MAX_DEPTH)))
    depth = 0
    while value:
        (value,) = value
        depth += 1
    assert depth == MAX_DEPTH


@pytest.mark.parametrize("data", [None, "93", 42, [0x93]])
def test_decode_refuses_what_is_not_bytes(data: Any) -> None:
    with pytest.raises(PayloadError, match="a payload must be bytes, got"):
        decode_call(data)


def test_decode_enforces_the_size_limit_before_parsing() -> None:
    data = encode_call("t:f", ["x" * 100])
    assert decode_call(data, max_size=len(data))
    with pytest.raises(PayloadError, match="the payload is 109 bytes, over the limit of 108"):
        decode_call(data, max_size=108)
    # garbage over the limit is refused for its size, not parsed
    with pytest.raises(PayloadError, match="over the limit"):
        decode_call(b"\xc1" * (DEFAULT_MAX_SIZE + 1))


# -- fuzzing -----------------------------------------------------------------------------


def _decode_or_refuse(data: bytes) -> None:
    try:
        name, args, kwargs = decode_call(data)
    except PayloadError:
        return
    assert type(name) is str and name
    assert type(args) is list
    assert type(kwargs) is dict and all(type(key) is str for key in kwargs)


@settings(max_examples=2_000)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes(data: bytes) -> None:
    _decode_or_refuse(data)


@settings(max_examples=1_000)
@given(st.binary(max_size=100))
def test_fuzz_random_bytes_after_a_call_header(data: bytes) -> None:
    # past the first bytes, so the fuzzer reaches args, kwargs and the ext types
    _decode_or_refuse(b"\x93\xa3t:f" + data)
    _decode_or_refuse(b"\x93\xa3t:f\x91" + data)


@settings(max_examples=1_000)
@given(st.sampled_from([bytes.fromhex(g[2]) for g in GOLDEN]), st.data())
def test_fuzz_mutated_golden_vectors(data: bytes, draw: st.DataObject) -> None:
    mutated = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 4))):
        index = draw.draw(st.integers(0, len(mutated) - 1))
        mutated[index] = draw.draw(st.integers(0, 255))
    cut = draw.draw(st.integers(0, len(mutated)))
    _decode_or_refuse(bytes(mutated[:cut]) + draw.draw(st.binary(max_size=8)))


def test_fuzz_seeded_bulk() -> None:
    # a large, reproducible sweep (no hypothesis shrinking needed: any failure prints)
    rng = random.Random(20260314)
    seeds = [bytes.fromhex(g[2]) for g in GOLDEN]
    for _ in range(20_000):
        base = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            base[rng.randrange(len(base))] = rng.randrange(256)
        if rng.random() < 0.3:
            base = bytearray(rng.randbytes(rng.randrange(64)))
        try:
            _decode_or_refuse(bytes(base))
        except AssertionError:
            pytest.fail(f"decode_call accepted a malformed call: {bytes(base).hex()}")


def test_every_int64_timedelta_decodes() -> None:
    for us in (-(2**63), 2**63 - 1):
        _, [value], _ = decode_call(_call(_ext(EXT_TIMEDELTA, struct.pack(">q", us))))
        assert value == timedelta(microseconds=us)
        assert encode_call("t:f", [value]) == _call(_ext(EXT_TIMEDELTA, struct.pack(">q", us)))


# -- the nesting limit --------------------------------------------------------------------


@dataclasses.dataclass
class Node:
    child: Any = None


def _nest(depth: int, kind: str) -> Any:
    """``depth`` containers, one inside the other, around 0: ``[[0]]`` is 2 levels."""
    value: Any = 0
    for level in range(depth):
        if kind == "list":
            value = [value]
        elif kind == "dict":
            value = {"a": value}
        elif kind == "dataclass":
            value = Node(value)
        else:  # lists and maps in turn, with a tuple every 10 levels (ext types count too)
            value = (value,) if level % 10 == 9 else [value] if level % 2 else {"a": value}
    return value


def test_the_nesting_limit_is_documented() -> None:
    assert MAX_NESTING == 100
    assert "100 levels" in (Path(__file__).parents[3] / "docs" / "wire-format.md").read_text()


@pytest.mark.parametrize("kind", ["list", "dict", "dataclass", "mixed"])
def test_values_nested_to_the_limit_travel(kind: str) -> None:
    _, [value], kwargs = decode_call(encode_call("t:f", [_nest(MAX_NESTING, kind)], {"k": 0}))
    levels = 0
    while value != 0:
        (value,) = value.values() if isinstance(value, dict) else value
        levels += 1
    assert levels == MAX_NESTING
    assert kwargs == {"k": 0}


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("list", "at args[0][0][0]"),
        ("dict", 'at args[0]["a"]["a"]'),
        ("dataclass", "at args[0].child.child"),
        ("mixed", 'at args[0]["a"][0]'),
    ],
)
def test_encode_refuses_values_past_the_limit(kind: str, path: str) -> None:
    with pytest.raises(PayloadError) as info:
        encode_call("t:f", [_nest(MAX_NESTING + 1, kind)])
    message = str(info.value)
    assert path in message
    assert message.endswith(f": containers nest deeper than {MAX_NESTING} levels")
    assert len(message) < 400


def test_encode_counts_the_levels_inside_tuples_too() -> None:
    # msgpack packs what a tuple holds on its own (an ext type): the limit still holds
    inside = (_nest(MAX_NESTING - 1, "list"),)
    assert encode_call("t:f", [inside])
    with pytest.raises(PayloadError, match=r"at args\[0\]\[0\]\[0\].*nest deeper than 100"):
        encode_call("t:f", [(_nest(MAX_NESTING, "list"),)])


def test_encode_refuses_very_deep_and_cyclic_values_with_a_payload_error() -> None:
    # past msgpack's own limits (its C packer raised ValueError or recursed for long)
    cycle = Node()
    cycle.child = [cycle]
    for value in (_nest(100_000, "list"), _nest(100_000, "dict"), cycle, (cycle,), [cycle]):
        with pytest.raises(PayloadError, match=r"nest deeper than 100 levels|contains itself"):
            encode_call("t:f", [1, value])


def _packed_call(value: Any, *, key: str | None = None) -> bytes:
    """The bytes of a call holding ``value``, packed by plain msgpack (no checks)."""
    args, kwargs = ([], {key: value}) if key else ([value], {})
    return msgpack.packb(["t:f", args, kwargs])


def test_decode_refuses_values_past_the_limit_naming_where() -> None:
    assert decode_call(_packed_call(_nest(MAX_NESTING, "list")))
    with pytest.raises(PayloadError) as info:
        decode_call(_packed_call(_nest(MAX_NESTING + 1, "list")))
    message = str(info.value)
    assert message.startswith(
        f"t:f: containers nest deeper than {MAX_NESTING} levels at args[0][0]"
    )
    assert len(message) < 300
    with pytest.raises(PayloadError, match=r'at kwargs\["tree"\]\["a"\]\["a"\]'):
        decode_call(_packed_call(_nest(MAX_NESTING + 1, "dict"), key="tree"))
    # beside a wide, shallow value, and far from the first item
    wide = [list(range(50)), {"x": [1, 2]}, _nest(MAX_NESTING + 1, "dict")]
    with pytest.raises(PayloadError, match=r'at args\[0\]\[2\]\["a"\]'):
        decode_call(_packed_call(wide))


def test_decode_counts_the_levels_inside_ext_types() -> None:
    # a tuple holding 100 levels of lists: 101 levels, though msgpack sees only 100 at once
    inner = msgpack.packb(_nest(MAX_NESTING, "list"))
    data = _call(_ext(EXT_TUPLE, b"\x91" + inner))
    with pytest.raises(PayloadError, match=r"containers nest deeper than 100 levels at args\[0\]"):
        decode_call(data)
    data = _call(_ext(EXT_TUPLE, b"\x91" + msgpack.packb(_nest(MAX_NESTING - 1, "list"))))
    assert decode_call(data)


def test_messages_stay_short_whatever_the_values() -> None:
    with pytest.raises(PayloadError, match=r"cannot encode int <int of 16610 bits> at args\[0\]"):
        encode_call("t:f", [10**5000])  # str() of it raises ValueError past 4,300 digits
    with pytest.raises(PayloadError) as info:
        encode_call("t:f", [{"k" * 100_000: Opaque()}])
    assert len(str(info.value)) < 400
    long_name = "x" * 100_000
    for data in (
        msgpack.packb([long_name, [], {b"k": 1}]),
        msgpack.packb([long_name, {}, {}]),
        msgpack.packb([long_name, [], []]),
    ):
        with pytest.raises(PayloadError) as info:
            decode_call(data)
        assert len(str(info.value)) < 300
    with pytest.raises(PayloadError) as info:
        encode_call(long_name, ["x" * 100], max_size=100)
    assert len(str(info.value)) < 300


def test_a_message_naming_nested_containers_stays_short() -> None:
    """Each level of a container shows 4 items, so nested ones multiply: the value
    shown is cut as a whole, however deep the payload a caller sends."""
    nested: Any = {f"{i}-{'é' * 70}": -3.8e16 for i in range(5)}
    for _ in range(4):
        nested = {f"{i}-{'k' * 70}": nested for i in range(5)}
    with pytest.raises(PayloadError) as info:
        decode_call(msgpack.packb(["t:f", [], nested, 0]))
    message = str(info.value)
    assert message.startswith("a call is an array [name, args, kwargs]"), message[:100]
    assert len(message) < 400, len(message)
