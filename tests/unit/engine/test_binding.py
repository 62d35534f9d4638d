"""Typed binding: decoded values back to the declared parameter types."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import logging
import sys
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal, NamedTuple, NewType, Optional, TypeVar, Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_htask.engine import ArgumentError, decode_call, encode_call
from django_htask.engine.binding import Binder, compile_converter, describe

WHEN = datetime(2026, 3, 14, 9, 30, tzinfo=UTC)
UserId = NewType("UserId", int)
T = TypeVar("T")


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 3


class Flagged(enum.Enum):
    YES = True
    NO = False


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: float = 0.0


@dataclasses.dataclass
class Reminder:
    text: str
    when: datetime
    color: Color = Color.RED
    points: list[Point] = dataclasses.field(default_factory=list)
    seen: bool = dataclasses.field(default=False, init=False)


@dataclasses.dataclass
class Tree:
    value: int
    children: list[Tree] = dataclasses.field(default_factory=list)


class Pair(NamedTuple):
    left: int
    right: str = "r"


def through_the_wire(
    fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Encode, decode and bind a call of ``fn`` as a worker would."""
    _, decoded_args, decoded_kwargs = decode_call(encode_call("t:f", args, kwargs))
    return Binder(fn, "t:f").bind(decoded_args, decoded_kwargs)


# -- scalars -----------------------------------------------------------------------------


def scalars(
    i: int,
    f: float,
    b: bool,
    s: str,
    raw: bytes,
    n: None,
    d: date,
    dt: datetime,
    t: time,
    td: timedelta,
    dec: Decimal,
    u: uuid.UUID,
) -> None: ...


SCALAR_VALUES = (
    7,
    2.5,
    True,
    "s",
    b"\x00",
    None,
    date(2026, 3, 14),
    WHEN,
    time(9, 30),
    timedelta(hours=1),
    Decimal("1.10"),
    uuid.UUID(int=5),
)


def test_scalars_pass_through_with_their_types() -> None:
    args, kwargs = through_the_wire(scalars, *SCALAR_VALUES)
    assert args == SCALAR_VALUES and kwargs == {}
    assert [type(a) for a in args] == [type(v) for v in SCALAR_VALUES]


def test_scalars_by_keyword() -> None:
    names = list(inspect.signature(scalars).parameters)
    args, kwargs = through_the_wire(scalars, **dict(zip(names, SCALAR_VALUES, strict=True)))
    assert args == ()
    assert kwargs == dict(zip(names, SCALAR_VALUES, strict=True))


def test_an_int_is_accepted_for_a_float_and_a_decimal() -> None:
    def fn(f: float, d: Decimal, *, kf: float) -> None: ...

    args, kwargs = Binder(fn).bind([3, 4], {"kf": 5})
    assert args == (3.0, Decimal(4)) and kwargs == {"kf": 5.0}
    assert type(args[0]) is float and type(kwargs["kf"]) is float
    assert type(args[1]) is Decimal


def test_bytearray_becomes_bytes() -> None:
    def fn(b: bytes) -> None: ...

    args, _ = Binder(fn).bind([bytearray(b"xy")])
    assert args == (b"xy",) and type(args[0]) is bytes


@pytest.mark.parametrize(
    ("hint", "value", "expected"),
    [
        (int, True, "expects int, got bool True"),
        (int, 1.0, "expects int, got float 1.0"),
        (int, "1", "expects int, got str '1'"),
        (float, False, "expects float, got bool False"),
        (float, "1.5", "expects float, got str '1.5'"),
        (float, 2**1100, "too large for a float"),
        (bool, 1, "expects bool, got int 1"),
        (str, b"x", "expects str, got bytes b'x'"),
        (bytes, "x", "expects bytes, got str 'x'"),
        (None, 0, "expects None, got int 0"),
        (date, WHEN, "expects date, got datetime"),
        (datetime, "2026-03-14T09:30:00", "expects datetime, got str '2026-03-14T09:30:00'"),
        (time, 0, "expects time, got int 0"),
        (timedelta, 60, "expects timedelta, got int 60"),
        (Decimal, 1.5, "expects Decimal, got float 1.5"),
        (Decimal, True, "expects Decimal, got bool True"),
        (uuid.UUID, "00000000-0000-0000-0000-000000000005", "expects UUID, got str"),
    ],
)
def test_scalar_mismatches_name_function_parameter_type_and_value(
    hint: Any, value: Any, expected: str
) -> None:
    def fn(param: Any) -> None: ...

    fn.__annotations__ = {"param": hint}
    with pytest.raises(ArgumentError) as info:
        Binder(fn, "myapp.tasks:fn").bind([value])
    message = str(info.value)
    assert message.startswith("myapp.tasks:fn() parameter 'param' expects ")
    assert expected in message


# -- unions, literals, aliases ------------------------------------------------------------


def test_optional_and_unions() -> None:
    def fn(
        a: int | None,
        b: Optional[str],  # noqa: UP045
        c: Union[int, str],  # noqa: UP007
        d: float | int,
        e: int | float,
    ) -> None: ...

    binder = Binder(fn)
    assert binder.bind([None, None, 1, 2, 3]) == ((None, None, 1, 2, 3), {})
    args, _ = binder.bind([4, "x", "y", 2, 3])
    assert args == (4, "x", "y", 2, 3)
    # an exact type match wins before trying the members in order: 2 stays an int
    assert type(args[3]) is int and type(args[4]) is int
    assert type(binder.bind([1, "x", 1, 2.5, 2.5])[0][4]) is float
    with pytest.raises(ArgumentError, match=r"parameter 'a' expects int \| None, got str 'x'"):
        binder.bind(["x", None, 1, 1, 1])
    with pytest.raises(ArgumentError, match=r"parameter 'c' expects int \| str, got bool True"):
        binder.bind([1, None, True, 1, 1])


def test_union_with_a_converting_member() -> None:
    def fn(a: list[int] | Color, b: float | None) -> None: ...

    assert Binder(fn).bind([(1, 2), 3]) == (([1, 2], 3.0), {})
    assert Binder(fn).bind(["green", None]) == ((Color.GREEN, None), {})


def test_literal_annotated_newtype_typevar_any_object_and_unannotated() -> None:
    def fn(
        mode: Literal["fast", "slow", 3],
        color: Literal[Color.RED],
        n: Annotated[int, "meta"],
        uid: UserId,
        anything: T,
        a: Any,
        o: object,
        plain,  # type: ignore[no-untyped-def]
    ) -> None: ...

    binder = Binder(fn)
    value = {"k": [1]}
    assert binder.bind(["slow", "red", 1, 2, value, value, value, value]) == (
        ("slow", Color.RED, 1, 2, value, value, value, value),
        {},
    )
    assert binder.bind([3, Color.RED, 1, 2, 0, 0, 0, 0])[0][:2] == (3, Color.RED)
    with pytest.raises(
        ArgumentError,
        match=r"parameter 'mode' expects Literal\['fast', 'slow', 3\], got str 'medium'",
    ):
        binder.bind(["medium", "red", 1, 2, 0, 0, 0, 0])
    with pytest.raises(ArgumentError, match=r"parameter 'mode' expects .*, got bool True"):
        binder.bind([True, "red", 1, 2, 0, 0, 0, 0])
    with pytest.raises(ArgumentError, match="parameter 'n' expects int, got str"):
        binder.bind(["fast", "red", "1", 2, 0, 0, 0, 0])
    with pytest.raises(ArgumentError, match="parameter 'uid' expects int, got float"):
        binder.bind(["fast", "red", 1, 2.0, 0, 0, 0, 0])


# -- containers ---------------------------------------------------------------------------


def test_containers_convert_their_items() -> None:
    def fn(
        a: list[int],
        b: tuple[int, ...],
        c: tuple[int, str],
        d: set[int],
        e: frozenset[str],
        f: dict[str, float],
        g: Sequence[date],
        h: Mapping[str, list[tuple[int, int]]],
        i: tuple[()],
    ) -> None: ...

    args, _ = Binder(fn).bind(
        [
            (1, 2),
            [1, 2],
            [1, "x"],
            [1, 2, 2],
            ["x"],
            {"k": 1},
            [date(2020, 1, 1)],
            {"k": [[1, 2]]},
            [],
        ]
    )
    assert args == (
        [1, 2],
        (1, 2),
        (1, "x"),
        {1, 2},
        frozenset({"x"}),
        {"k": 1.0},
        [date(2020, 1, 1)],
        {"k": [(1, 2)]},
        (),
    )
    assert [type(a) for a in args] == [list, tuple, tuple, set, frozenset, dict, list, dict, tuple]
    assert type(args[5]["k"]) is float
    assert type(args[7]["k"][0]) is tuple


def test_bare_containers() -> None:
    def fn(a: list, b: tuple, c: set, d: frozenset, e: dict) -> None:  # type: ignore[type-arg]
        ...

    assert Binder(fn).bind([(1,), [1], [1], {1}, {"a": 1}]) == (
        ([1], (1,), {1}, frozenset({1}), {"a": 1}),
        {},
    )


@pytest.mark.parametrize(
    ("hint", "value", "expected"),
    [
        (list[int], "abc", "parameter 'p' expects list[int], got str 'abc'"),
        (list[int], [1, "2", 3], "parameter 'p' expects list[int]: p[1] expects int, got str '2'"),
        (list[datetime], [WHEN, WHEN, "x"], "p[2] expects datetime, got str 'x'"),
        (tuple[int, str], [1], "expects tuple[int, str], got list [1] (2 items expected, got 1)"),
        (tuple[int, str], [1, 2], "p[1] expects str, got int 2"),
        (tuple[int, ...], {"a": 1}, "expects tuple[int, ...], got dict"),
        (set[int], [[1]], "expects set[int]: p[0] expects int, got list [1]"),
        (set[int], [1, "x"], "p[1] expects int, got str 'x'"),
        (set[int], {"x"}, "p{*} expects int, got str 'x'"),
        (set, [[1]], "unhashable type"),
        (dict[str, int], [1], "expects dict[str, int], got list [1]"),
        (dict[str, int], {"a": 1, "b": "2"}, "p['b'] expects int, got str '2'"),
        (dict[int, int], {"a": 1}, "p key 'a' expects int, got str 'a'"),
        (dict[str, list[int]], {"k": [1, 2, None]}, "p['k'][2] expects int, got None"),
    ],
)
def test_container_mismatches_name_the_item(hint: Any, value: Any, expected: str) -> None:
    def fn(p: Any) -> None: ...

    fn.__annotations__ = {"p": hint}
    with pytest.raises(ArgumentError) as info:
        Binder(fn, "t:f").bind([value])
    assert str(info.value).startswith("t:f() parameter 'p' expects")
    assert expected in str(info.value)


# -- enums, dataclasses, named tuples -------------------------------------------------------


def test_enums_by_value() -> None:
    def fn(c: Color, lv: Level, fl: Flagged) -> None: ...

    binder = Binder(fn)
    assert binder.bind(["green", 3, True]) == ((Color.GREEN, Level.HIGH, Flagged.YES), {})
    assert binder.bind([Color.RED, Level.LOW, Flagged.NO]) == (
        (Color.RED, Level.LOW, Flagged.NO),
        {},
    )
    with pytest.raises(
        ArgumentError,
        match=r"parameter 'c' expects Color, got str 'blue' "
        r"\(not one of its values: 'red', 'green'\)",
    ):
        binder.bind(["blue", 3, True])
    with pytest.raises(ArgumentError, match="parameter 'lv' expects Level, got bool True"):
        binder.bind(["red", True, True])
    with pytest.raises(ArgumentError, match="parameter 'c' expects Color, got list"):
        binder.bind([["red"], 1, True])


def test_dataclasses_from_a_map() -> None:
    def fn(r: Reminder, tree: Tree, p: Point | None = None) -> None: ...

    sent = Reminder("hi", WHEN, Color.GREEN, [Point(1, 2.5)])
    tree = Tree(1, [Tree(2, [Tree(3)])])
    args, _ = through_the_wire(fn, sent, tree, Point(1))
    assert args == (sent, tree, Point(1, 0.0))
    assert type(args[0].points[0]) is Point and args[0].color is Color.GREEN
    # fields with defaults may be left out; an instance passes as it is
    assert Binder(fn).bind([{"text": "x", "when": WHEN}, tree])[0][0] == Reminder("x", WHEN)
    assert Binder(fn).bind([sent, tree])[0][0] is sent


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            [1, 2],
            "parameter 'r' expects Reminder, got list [1, 2] "
            "(a dataclass is sent as a map of its fields)",
        ),
        ({"text": "x"}, "expects Reminder, got dict {'text': 'x'} (missing field 'when')"),
        ({"text": "x", "when": WHEN, "seen": True}, "(unexpected field 'seen')"),
        (
            {"text": "x", "when": "now"},
            "parameter 'r' expects Reminder: r.when expects datetime, got str 'now'",
        ),
        (
            {"text": "x", "when": WHEN, "points": [{"x": "1"}]},
            "r.points[0].x expects int, got str '1'",
        ),
    ],
)
def test_dataclass_mismatches(value: Any, expected: str) -> None:
    def fn(r: Reminder) -> None: ...

    with pytest.raises(ArgumentError) as info:
        Binder(fn).bind([value])
    assert expected in str(info.value)


def test_a_dataclass_that_refuses_its_fields() -> None:
    @dataclasses.dataclass
    class Positive:
        n: int

        def __post_init__(self) -> None:
            if self.n <= 0:
                raise ValueError(f"n must be positive, got {self.n}")

    def fn(p: Positive) -> None: ...

    fn.__annotations__ = {"p": Positive}
    assert Binder(fn).bind([{"n": 1}])[0] == (Positive(1),)
    with pytest.raises(
        ArgumentError, match=r"expects Positive, got dict .*ValueError: n must be positive, got 0"
    ):
        Binder(fn).bind([{"n": 0}])


def test_named_tuples_from_an_array() -> None:
    def fn(p: Pair) -> None: ...

    assert Binder(fn).bind([[1, "x"]]) == ((Pair(1, "x"),), {})
    assert Binder(fn).bind([(1,)]) == ((Pair(1, "r"),), {})
    with pytest.raises(ArgumentError, match=r"p.left expects int, got str 'a'"):
        Binder(fn).bind([["a", "b"]])
    with pytest.raises(
        ArgumentError, match=r"expects Pair, got list \[1, 'x', 2\] \(2 items expected, got 3\)"
    ):
        Binder(fn).bind([[1, "x", 2]])


def test_other_classes_take_their_instances() -> None:
    class Thing:
        pass

    def fn(t: Thing) -> None: ...

    fn.__annotations__ = {"t": Thing}
    thing = Thing()
    assert Binder(fn).bind([thing]) == ((thing,), {})
    with pytest.raises(ArgumentError, match="parameter 't' expects Thing, got int 1"):
        Binder(fn).bind([1])


# -- the shape of the call -------------------------------------------------------------------


def shaped(
    a: int, /, b: str, c: float = 1.0, *rest: date, d: bool, e: int = 0, **extra: timedelta
) -> None: ...


def test_positional_only_defaults_varargs_keyword_only_and_varkw() -> None:
    binder = Binder(shaped, "t:shaped")
    assert binder.bind([1, "b"], {"d": True}) == ((1, "b"), {"d": True})
    assert binder.bind([1], {"b": "b", "c": 2, "d": False}) == (
        (1,),
        {"b": "b", "c": 2.0, "d": False},
    )
    args, kwargs = binder.bind(
        [1, "b", 3, date(2020, 1, 1), date(2020, 1, 2)], {"d": True, "e": 5, "x": timedelta(1)}
    )
    assert args == (1, "b", 3.0, date(2020, 1, 1), date(2020, 1, 2))
    assert kwargs == {"d": True, "e": 5, "x": timedelta(1)}
    shaped(*args, **kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        (
            [1, "b", 1.0, "2020-01-01"],
            {"d": True},
            "parameter 'rest' expects date: rest[0] expects date, got str '2020-01-01'",
        ),
        (
            [1, "b"],
            {"d": True, "x": 5},
            "parameter 'extra' expects timedelta: extra['x'] expects timedelta, got int 5",
        ),
        ([1, "b"], {}, "t:shaped() missing required argument: 'd'"),
        ([], {"d": True}, "t:shaped() missing required arguments: 'a', 'b'"),
        ([], {"a": timedelta(1), "b": "b", "d": True}, "missing required argument: 'a'"),
        ([], {"a": 1, "b": "b", "d": True}, "extra['a'] expects timedelta, got int 1"),
        ([1, "b"], {"b": "again", "d": True}, "t:shaped() got multiple values for argument 'b'"),
        (["1", "b"], {"d": True}, "t:shaped() parameter 'a' expects int, got str '1'"),
        ([1, "b"], {"d": 1}, "t:shaped() parameter 'd' expects bool, got int 1"),
        ([1, "b"], {"d": True, 5: 1}, "t:shaped() keywords must be str, got int 5"),
        ("ab", {}, "t:shaped() args must be a list or tuple, got str 'ab'"),
        ([1, "b"], [("d", True)], "t:shaped() kwargs must be a map, got list"),
    ],
)
def test_call_shape_errors(args: Any, kwargs: Any, expected: str) -> None:
    with pytest.raises(ArgumentError) as info:
        Binder(shaped, "t:shaped").bind(args, kwargs)
    assert expected in str(info.value)


def plain(a: int, b: str = "") -> None: ...


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ([1, "b", 3], {}, "t:plain() takes 2 positional arguments but 3 were given"),
        ([], {}, "t:plain() missing required argument: 'a'"),
        ([1], {"c": 3}, "t:plain() got an unexpected keyword argument 'c'"),
    ],
)
def test_missing_and_unexpected_arguments(args: Any, kwargs: Any, expected: str) -> None:
    with pytest.raises(ArgumentError) as info:
        Binder(plain, "t:plain").bind(args, kwargs)
    assert str(info.value) == expected


def test_a_positional_only_parameter_given_by_keyword() -> None:
    def fn(a: int, /) -> None: ...

    with pytest.raises(ArgumentError, match=r"got positional-only argument 'a' as a keyword"):
        Binder(fn).bind([], {"a": 1})
    with pytest.raises(ArgumentError, match=r"takes 1 positional argument but 2 were given"):
        Binder(fn).bind([1, 2])


def test_bound_arguments_call_the_function() -> None:
    seen: list[Any] = []

    def fn(a: tuple[int, int], *, when: datetime, tags: set[str]) -> None:
        seen.append((a, when, tags))

    args, kwargs = through_the_wire(fn, [1, 2], when=WHEN, tags=["x", "y"])
    fn(*args, **kwargs)
    assert seen == [((1, 2), WHEN, {"x", "y"})]


# -- reflection happens once ------------------------------------------------------------------


def test_the_signature_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_signature, real_hints = inspect.signature, typing.get_type_hints

    def count_signature(*args: Any, **kwargs: Any) -> Any:
        calls.append("signature")
        return real_signature(*args, **kwargs)

    def count_hints(*args: Any, **kwargs: Any) -> Any:
        calls.append("hints")
        return real_hints(*args, **kwargs)

    monkeypatch.setattr(inspect, "signature", count_signature)
    monkeypatch.setattr(typing, "get_type_hints", count_hints)
    binder = Binder(scalars)
    built = len(calls)
    assert built >= 2
    for _ in range(100):
        binder.bind(list(SCALAR_VALUES))
        binder.bind(
            [
                1,
                2,
                True,
                "s",
                b"",
                None,
                date(2020, 1, 1),
                WHEN,
                time(),
                timedelta(),
                1,
                uuid.UUID(int=1),
            ]
        )
    assert len(calls) == built


class HashRefused:
    """An annotation object no dict can hold: hashing it raises."""

    def __call__(self) -> None: ...

    def __hash__(self) -> int:
        raise ValueError("no hash")


@pytest.mark.parametrize(
    ("hint", "action"),
    [("NoSuchType", "binding.unresolved_hint"), (HashRefused(), "binding.unusable_hint")],
    ids=["unresolvable", "no converter can be made"],
)
def test_unusable_hints_take_values_as_decoded(
    hint: Any, action: str, caplog: pytest.LogCaptureFixture
) -> None:
    def fn(a: Any, b: int) -> None: ...

    fn.__annotations__ = {"a": hint, "b": "int"}
    with caplog.at_level(logging.WARNING, logger="django_htask.engine.binding"):
        binder = Binder(fn, "t:fn")
    assert binder.bind([object, 1])[0] == (object, 1)
    with pytest.raises(ArgumentError, match="parameter 'b' expects int"):
        binder.bind([1, "x"])
    assert [r.action for r in caplog.records] == [action]  # type: ignore[attr-defined]
    assert "t:fn() parameter 'a'" in caplog.records[0].getMessage()


def test_describe() -> None:
    assert describe(int | None) == "int | None"
    assert describe(dict[str, list[tuple[int, ...]]]) == "dict[str, list[tuple[int, ...]]]"
    assert describe(Literal["a", 1]) == "Literal['a', 1]"
    assert describe(Any) == "Any"
    assert describe(Point) == "Point"
    assert compile_converter(Any) is None
    assert compile_converter(int) is not None


# -- property: whatever travels comes back with its declared type --------------------------------

_HINTED: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (int, st.integers(-(2**63), 2**63 - 1)),
    (float, st.floats(allow_nan=False)),
    (bool, st.booleans()),
    (str, st.text()),
    (bytes, st.binary()),
    (
        datetime,
        st.datetimes(
            min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
        ),
    ),
    (date, st.dates()),
    (time, st.times()),
    (timedelta, st.timedeltas(min_value=timedelta(days=-(10**8)), max_value=timedelta(days=10**8))),
    (Decimal, st.decimals(allow_nan=False)),
    (uuid.UUID, st.uuids()),
    (Color, st.sampled_from(Color)),
    (Level, st.sampled_from(Level)),
    (Point, st.builds(Point, st.integers(-100, 100), st.floats(allow_nan=False))),
    (Pair, st.builds(Pair, st.integers(-100, 100), st.text())),
]


def _typed(
    children: st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]],
) -> st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]]:
    def wrap(
        pair: tuple[Any, st.SearchStrategy[Any]], kind: str
    ) -> tuple[Any, st.SearchStrategy[Any]]:
        hint, values = pair
        if kind == "list":
            return list[hint], st.lists(values, max_size=3)  # type: ignore[valid-type]
        if kind == "tuple":
            return tuple[hint, ...], st.lists(values, max_size=3).map(tuple)  # type: ignore[valid-type]
        if kind == "pair":
            return tuple[hint, int], st.tuples(values, st.integers(0, 9))  # type: ignore[valid-type]
        if kind == "dict":
            return dict[str, hint], st.dictionaries(st.text(), values, max_size=3)  # type: ignore[valid-type]
        return hint | None, st.one_of(st.none(), values)

    return st.tuples(children, st.sampled_from(["list", "tuple", "pair", "dict", "optional"])).map(
        lambda p: wrap(*p)
    )


_HINT_AND_VALUES = st.recursive(st.sampled_from(_HINTED), _typed, max_leaves=3)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, Decimal):
        return str(a) == str(b)
    return bool(a == b)


@settings(max_examples=300)
@given(st.data())
def test_values_come_back_with_their_declared_types(data: st.DataObject) -> None:
    hint, values = data.draw(_HINT_AND_VALUES)
    value = data.draw(values)

    def fn(p: Any, *, k: Any) -> None: ...

    fn.__annotations__ = {"p": hint, "k": hint}
    args, kwargs = through_the_wire(fn, value, k=value)
    assert _same(args[0], value), (hint, value, args[0])
    assert _same(kwargs["k"], value), (hint, value, kwargs["k"])


# -- cost: in proportion to the value, wherever it is wrong ----------------------------------


@dataclasses.dataclass
class Node:  # the issue's example
    children: list[Node]
    v: int = 0


@dataclasses.dataclass
class IntNode:
    children: list[IntNode | StrNode]
    v: int = 0


@dataclasses.dataclass
class StrNode:  # takes the same maps as IntNode, but with a str ``v``
    children: list[IntNode | StrNode]
    v: str = ""


@dataclasses.dataclass
class Shapes:
    by_key: dict[str, Shapes] = dataclasses.field(default_factory=dict)
    row: tuple[Shapes, ...] = ()
    pair: tuple[Shapes, int] | None = None
    v: int = 0


class Branch(NamedTuple):
    kids: frozenset[Branch]
    v: int = 0


class _OverBudget(BaseException):
    """Raised when a call makes more Python calls than allowed (past ``except Exception``)."""


def _python_calls(call: Callable[[], object], budget: int) -> int:
    """How many Python functions ``call()`` runs; raises _OverBudget past ``budget``.

    Counts work, not time: a binding that walks a value again after a failure (what
    made each level double the cost) runs far more functions, on any machine.
    """
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1
            if calls > budget:
                raise _OverBudget(f"more than {budget} Python calls")

    sys.setprofile(profile)
    try:
        call()
    except ArgumentError:
        pass
    finally:
        sys.setprofile(None)
    return calls


def _chain(depth: int, leaf: Any, v: Any = 1) -> dict[str, Any]:
    """``depth`` nodes, each the only child of the one above, the last with ``v=leaf``."""
    node: dict[str, Any] = {"children": [], "v": leaf}
    for _ in range(depth - 1):
        node = {"children": [node], "v": v}
    return node


def _binder(hint: Any) -> Binder:
    def fn(tree: Any) -> None: ...

    fn.__annotations__ = {"tree": hint}
    return Binder(fn, "t:f")


@pytest.mark.parametrize("depth", [18, 20, 40])
def test_a_mismatch_deep_in_a_recursive_dataclass_costs_work_in_proportion(depth: int) -> None:
    binder = _binder(Node)
    payload = encode_call("t:f", [], {"tree": _chain(depth, "x")})
    _, args, kwargs = decode_call(payload)
    # before: 2.2 s for 18 levels, doubling per level (each list walked again to name
    # the failing item); now a few calls per node
    calls = _python_calls(lambda: binder.bind(args, kwargs), budget=10 * depth + 50)
    assert calls <= 10 * depth + 50
    with pytest.raises(ArgumentError) as info:
        binder.bind(args, kwargs)
    path = "tree" + ".children[0]" * (depth - 1) + ".v"
    assert str(info.value) == (
        f"t:f() parameter 'tree' expects Node: {path} expects int, got str 'x'"
    )


def _bad_leaf(depth: int) -> dict[str, Any]:
    return _chain(depth, 1.5)  # neither an int nor a str: each level tries both members


def _late_failure(depth: int) -> dict[str, Any]:
    # valid, as StrNodes all the way down; IntNode fails each node only after its
    # children converted (v comes after them), so each level tries both members
    return _chain(depth, "s", "s")


@pytest.mark.parametrize("depth", [18, 40])
@pytest.mark.parametrize("make", [_bad_leaf, _late_failure])
def test_unions_of_recursive_types_cost_work_in_proportion(
    make: Callable[[int], dict[str, Any]], depth: int
) -> None:
    binder = _binder(IntNode | StrNode)
    value = make(depth)
    calls = _python_calls(lambda: binder.bind([value]), budget=40 * depth + 100)
    assert calls <= 40 * depth + 100
    if make is _late_failure:
        (tree,), _ = binder.bind([value])
        for _ in range(depth - 1):
            assert type(tree) is StrNode
            (tree,) = tree.children
        assert tree == StrNode([], "s")
    else:
        with pytest.raises(ArgumentError, match=r"expects IntNode \| StrNode, got dict"):
            binder.bind([value])


def _shapes(depth: int, kind: str, leaf: Any) -> Any:
    """``depth`` Shapes, each holding the next in its ``kind`` of field."""
    value: Any = {"v": leaf}
    for _ in range(depth - 1):
        if kind == "dict":
            value = {"by_key": {"k": value}}
        elif kind == "tuple":
            value = {"row": (value,)}
        else:
            value = {"pair": [value, 1]}
    return value


@pytest.mark.parametrize(
    ("hint", "kind", "path"),
    [
        (Shapes, "dict", "tree" + ".by_key['k']" * 29 + ".v"),
        (Shapes, "tuple", "tree" + ".row[0]" * 29 + ".v"),
        (Shapes | None, "pair", "tree" + ".pair[0]" * 29 + ".v"),
    ],
)
def test_nesting_of_every_kind_costs_work_in_proportion(hint: Any, kind: str, path: str) -> None:
    binder = _binder(hint)
    value = _shapes(30, kind, "x")
    assert _python_calls(lambda: binder.bind([value]), budget=600) <= 600
    with pytest.raises(ArgumentError) as info:
        binder.bind([value])
    assert str(info.value).endswith(f": {path} expects int, got str 'x'")
    assert binder.bind([_shapes(30, kind, 1)])


def test_named_tuples_in_sets_cost_work_in_proportion() -> None:
    binder = _binder(Branch)
    value: Any = (frozenset(), "x")
    for _ in range(29):
        value = (frozenset({value}), 1)
    assert _python_calls(lambda: binder.bind([value]), budget=600) <= 600
    with pytest.raises(ArgumentError, match=r"tree(\.kids\{\*\}){29}\.v expects int, got str 'x'"):
        binder.bind([value])


# -- the nesting limit -------------------------------------------------------------------------


def test_a_tree_just_within_the_limit_binds() -> None:
    # 50 nodes: the last one's map is 99 levels deep, its empty list 100 (MAX_NESTING)
    (tree,), _ = _binder(Node).bind([_chain(50, 0)])
    depth = 1
    while tree.children:
        (tree,) = tree.children
        depth += 1
    assert depth == 50


@pytest.mark.parametrize("hint", [Node, Node | None, IntNode | StrNode])
@pytest.mark.parametrize("nodes", [51, 510])
def test_a_tree_past_the_limit_raises_argument_error(hint: Any, nodes: int) -> None:
    with pytest.raises(ArgumentError) as info:
        _binder(hint).bind([_chain(nodes, 0)])
    message = str(info.value)
    assert message.startswith(f"t:f() parameter 'tree' expects {describe(hint)}: ")
    assert "containers nest deeper than 100 levels at tree.children[0].children[0]" in message
    assert len(message) < 400


def test_a_value_that_contains_itself_raises_argument_error() -> None:
    loop: dict[str, Any] = {"children": [], "v": 1}
    loop["children"].append(loop)
    for hint, value in ((Node, loop), (dict[str, list[Node]], {"a": [loop]})):
        with pytest.raises(ArgumentError, match="containers nest deeper than 100 levels"):
            _binder(hint).bind([value])


def test_binding_with_little_stack_left_raises_argument_error() -> None:
    binder = _binder(Node)
    value = _chain(50, 0)
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 40)  # room to call bind, not to walk 100 levels
    try:
        with pytest.raises(ArgumentError, match="nests too deeply for the stack left"):
            binder.bind([value])
    finally:
        sys.setrecursionlimit(limit)


# -- hostile values: only ArgumentError, with a short message --------------------------------


class Strict(enum.Enum):
    ONE = 1

    @classmethod
    def _missing_(cls, value: object) -> Any:
        raise RuntimeError(f"no {value!r} here")


@pytest.mark.parametrize(
    ("hint", "value", "expected"),
    [
        (str, 10**5000, "expects str, got int <int of 16610 bits>"),
        (Level, Decimal("sNaN"), "expects Level, got Decimal Decimal('sNaN')"),
        (Strict, 2, "expects Strict, got int 2 (not one of its values: 1)"),
        (Literal[Level.LOW], Decimal("sNaN"), "expects Literal[<Level.LOW: 1>]"),
        (Literal[Decimal("1")], Decimal("sNaN"), "expects Literal[Decimal('1')]"),
        (dict[list[int], int], {(1,): 1}, "got dict {(1,): 1} (key [1]: unhashable type: 'list')"),
        (set[Decimal], [Decimal("sNaN")], "(Cannot hash a signaling NaN value)"),
        (float, 10**400, "expects float, got int <int of 1329 bits> (too large for a float)"),
        (int, b"x" * 10**6, "expects int, got bytes b'xxxxx"),
        (int, "x" * 10**6, "expects int, got str 'xxxxx"),
    ],
    ids=[
        "huge int",
        "signalling NaN for an Enum",
        "Enum whose _missing_ raises",
        "signalling NaN for an Enum Literal",
        "signalling NaN for a Decimal Literal",
        "unhashable key",
        "signalling NaN in a set",
        "int too large for a float",
        "long bytes",
        "long str",
    ],
)
def test_hostile_values_raise_argument_error(hint: Any, value: Any, expected: str) -> None:
    with pytest.raises(ArgumentError) as info:
        _binder(hint).bind([value])
    assert expected in str(info.value)
    assert len(str(info.value)) < 300


def test_long_keywords_are_named_shortly() -> None:
    def fixed(a: int) -> None: ...

    def varkw(**extra: int) -> None: ...

    key = "k" * 100_000
    for fn, kwargs in ((fixed, {key: 1}), (varkw, {key: "x"})):
        with pytest.raises(ArgumentError) as info:
            Binder(fn, "t:f").bind([], kwargs)
        assert len(str(info.value)) < 300


def test_compile_converter_raises_argument_error_naming_where() -> None:
    convert = compile_converter(dict[str, list[int]])
    assert convert is not None
    assert convert({"a": (1, 2)}) == {"a": [1, 2]}
    with pytest.raises(
        ArgumentError, match=r"^expects dict\[str, list\[int\]\]: value\['a'\]\[1\]"
    ):
        convert({"a": [1, "2"]})
