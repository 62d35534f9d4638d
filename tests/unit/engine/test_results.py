"""A function's return value on the wire: ``encode_result`` / ``decode_result`` (the
value alone, with an argument's types and limits) and the binder's conversion to the
declared return type (``Binder.result``, ``Registry.read_result``)."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any

import pytest

from django_htask.engine import (
    ArgumentError,
    Binder,
    FunctionNotRegistered,
    PayloadError,
    Registry,
    decode_result,
    encode_call,
    encode_result,
)
from django_htask.engine.codec import MAX_NESTING


class Color(Enum):
    RED = "red"


@dataclass(frozen=True)
class Point:
    x: int
    on: date


VALUES: list[Any] = [
    0,
    -(1 << 63),
    (1 << 64) - 1,
    1.5,
    True,
    "héllo",
    b"\x00\xff",
    [1, [2, "3"]],
    {"a": {"b": None}},
    (1, (2,)),
    {1, 2},
    frozenset({"x"}),
    datetime(2030, 1, 1, 12, 30, tzinfo=UTC),
    datetime(2030, 1, 1, 12, 30),
    date(2030, 1, 1),
    time(9, 30, 15, 250_000),
    timedelta(days=1, microseconds=1),
    Decimal("12.50"),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_values_round_trip_with_their_types(value: Any) -> None:
    decoded = decode_result(encode_result(value))
    assert decoded == value and type(decoded) is type(value)


def test_a_result_is_the_msgpack_value_an_argument_would_be() -> None:
    # The same bytes as the value inside a call's args (after the call's framing).
    call = encode_call("f", [(1, "a")], {})
    assert encode_result((1, "a")) in call
    assert encode_result((1, "a")) == bytes.fromhex("d60792 01a161".replace(" ", ""))


def test_dataclasses_and_enums_travel_as_their_fields_and_values() -> None:
    assert decode_result(encode_result(Point(1, date(2030, 1, 2)))) == {
        "x": 1,
        "on": date(2030, 1, 2),
    }
    assert decode_result(encode_result(Color.RED)) == "red"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (object(), "cannot encode object <object object at 0x"),
        ({"a": [1, object()]}, 'at result["a"][1]: its type is not supported'),
        ({1: "x"}, "cannot encode int 1 at a key of result: map keys must be str or bytes"),
        (1 << 64, "at result: msgpack integers are 64-bit"),
        (time(1, tzinfo=UTC), "a time with a tzinfo cannot travel"),
    ],
)
def test_a_value_that_cannot_travel_is_named_with_its_path(value: Any, message: str) -> None:
    with pytest.raises(PayloadError) as raised:
        encode_result(value)
    assert message in str(raised.value)


def test_a_value_that_contains_itself_or_nests_too_deep_is_refused() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(PayloadError, match="at result\\[1\\]: it contains itself"):
        encode_result(loop)
    deep: list[Any] = []
    for _ in range(MAX_NESTING + 1):
        deep = [deep]
    with pytest.raises(PayloadError, match=f"nest deeper than {MAX_NESTING} levels"):
        encode_result(deep)
    fits: list[Any] = []
    for _ in range(MAX_NESTING - 1):
        fits = [fits]
    assert decode_result(encode_result(fits)) == fits


def test_the_size_limit_names_the_type_the_size_and_the_limit() -> None:
    assert len(encode_result("x" * 98, max_size=100)) == 100
    with pytest.raises(PayloadError) as raised:
        encode_result("x" * 99, max_size=100)
    assert str(raised.value) == "the result (str) is 101 bytes encoded, over the limit of 100"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "cannot decode the result (0 bytes)"),
        (b"\xc1", "cannot decode the result (1 bytes)"),
        (b"\x01\x02", "cannot decode the result (2 bytes)"),  # trailing bytes
        (b"\xc7\x01\x63\x00", "unknown ext type 99"),
        (b"\x91" * 150 + b"\x90", f"containers nest deeper than {MAX_NESTING} levels at result"),
    ],
)
def test_bytes_that_are_not_one_result_raise_payload_error(data: bytes, message: str) -> None:
    with pytest.raises(PayloadError, match=message.replace("(", "\\(").replace(")", "\\)")):
        decode_result(data)


def test_decoding_checks_the_size_first_and_the_type_of_its_input() -> None:
    with pytest.raises(PayloadError, match="the result is 5 bytes, over the limit of 4"):
        decode_result(encode_result("abcd"), max_size=4)
    assert decode_result(memoryview(encode_result("ab"))) == "ab"
    with pytest.raises(PayloadError, match="a result must be bytes, got str 'x'"):
        decode_result("x")  # type: ignore[arg-type]


# -- the declared return type ---------------------------------------------------------
def returns_point() -> Point: ...


def returns_pairs() -> dict[str, tuple[int, Color]]: ...


def returns_plain(): ...  # type: ignore[no-untyped-def]


def returns_unknown() -> Missing: ...  # type: ignore[name-defined]  # noqa: F821


def test_a_decoded_result_is_converted_to_the_return_annotation() -> None:
    point = Binder(returns_point).result(decode_result(encode_result(Point(1, date(2030, 1, 1)))))
    assert point == Point(1, date(2030, 1, 1))
    pairs = Binder(returns_pairs).result({"a": [1, "red"]})
    assert pairs == {"a": (1, Color.RED)}
    assert Binder(returns_plain).result([1]) == [1]


def test_a_result_that_does_not_fit_its_annotation_is_named() -> None:
    with pytest.raises(ArgumentError) as raised:
        Binder(returns_point, "t:p").result({"x": "1", "on": date(2030, 1, 1)})
    assert str(raised.value) == "t:p() returns Point: result.x expects int, got str '1'"


def test_an_unresolvable_return_hint_reads_the_result_as_decoded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="django_htask.engine.binding"):
        assert Binder(returns_unknown).result({"a": 1}) == {"a": 1}


def test_the_registry_reads_a_result_of_a_registered_function() -> None:
    registry = Registry()
    registry.register(returns_point, "t:point")
    data = encode_result(Point(3, date(2030, 1, 1)))
    assert registry.read_result("t:point", data) == Point(3, date(2030, 1, 1))
    with pytest.raises(FunctionNotRegistered, match="t:gone"):
        registry.read_result("t:gone", data)
