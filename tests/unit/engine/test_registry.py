"""The function registry: names, lookups, autodiscovery, bind / call / check_call."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import functools
import importlib
import struct
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, NamedTuple

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_htask.engine import (
    ArgumentError,
    FunctionNotRegistered,
    HtaskError,
    PayloadError,
    Registry,
    decode_call,
    encode_call,
    registry,
)
from django_htask.engine.binding import Binder
from django_htask.engine.codec import MAX_NESTING
from django_htask.engine.registry import default_name

# (``django_htask.engine.registry`` is the default Registry; the module is in sys.modules)
registry_module = importlib.import_module("django_htask.engine.registry")
WHEN = datetime(2026, 3, 14, 9, 30, tzinfo=UTC)
NAME = f"{__name__}:remind"


def remind(user_id: int, text: str, when: datetime, *, tags: tuple[str, ...] = ()) -> str:
    return f"{user_id}:{text}:{when.isoformat()}:{','.join(tags)}"


def other(user_id: int) -> int:
    return user_id


async def remind_later(user_id: int) -> int:
    return user_id * 2


def explode() -> None:
    raise RuntimeError("boom")


class Holder:
    def method(self) -> None: ...

    @classmethod
    def klass(cls) -> None: ...

    @staticmethod
    def static(n: int) -> int:
        return n


class CallableThing:
    def __call__(self) -> None: ...


def make_nested() -> Callable[[], None]:
    def nested() -> None: ...

    return nested


# -- registration --------------------------------------------------------------------------


def test_the_default_registry_and_errors_are_exported() -> None:
    assert isinstance(registry, Registry)
    assert issubclass(FunctionNotRegistered, LookupError) and issubclass(
        FunctionNotRegistered, HtaskError
    )
    assert issubclass(PayloadError, HtaskError) and issubclass(ArgumentError, HtaskError)


def test_register_names_a_function_by_module_and_qualname() -> None:
    reg = Registry()
    assert reg.register(remind) is remind
    assert default_name(remind) == NAME
    assert reg.get(NAME) is remind
    assert reg.name_of(remind) == NAME
    assert reg.register(Holder.static) is Holder.static
    assert reg.get(f"{__name__}:Holder.static") is Holder.static


def test_register_as_a_decorator() -> None:
    reg = Registry()

    def fn(n: int) -> int:
        return n

    fn.__qualname__ = "fn"  # as if defined at module level
    assert reg.register(fn) is fn
    assert reg.register("custom.name")(other) is other
    assert reg.register(name="kw.name")(other) is other
    assert reg.names() == ["custom.name", "kw.name", f"{__name__}:fn"]
    assert reg.name_of(other) == "custom.name"  # the first name it got
    assert len(reg) == 3 and "kw.name" in reg and list(reg) == reg.names()
    assert "Registry of 3 functions" in repr(reg)


def test_re_registering_the_same_function_is_fine() -> None:
    reg = Registry()
    reg.register(remind)
    reg.register(remind)
    reg.register(remind, NAME)
    assert reg.names() == [NAME]


def test_a_taken_name_refuses_another_function() -> None:
    reg = Registry()
    reg.register(remind, "tasks.remind")
    with pytest.raises(
        ValueError, match=r"'tasks\.remind' is already registered to <function remind"
    ):
        reg.register(other, "tasks.remind")
    assert reg.get("tasks.remind") is remind


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda: None, "cannot register the lambda .*<lambda>: a lambda has no stable name"),
        (
            functools.partial(other, 1),
            "cannot register functools.partial.*: a functools.partial has no name",
        ),
        (
            make_nested(),
            "cannot register .*make_nested.<locals>.nested: it is defined inside a function",
        ),
        (Holder().method, "cannot register bound method Holder.method of"),
        (Holder.klass, "cannot register bound method Holder.klass of"),
        (print, r"cannot register <built-in function print> \(builtin_function_or_method\)"),
        (CallableThing(), r"\(CallableThing\): only functions defined with def"),
        ("tasks:remind", "cannot register 'tasks:remind': it is not callable"),
        (42, "cannot register 42: it is not callable"),
    ],
)
def test_unnameable_functions_are_refused(fn: Any, message: str) -> None:
    reg = Registry()
    with pytest.raises(TypeError, match=message):
        reg._add(fn, None)
    assert len(reg) == 0


def test_the_decorator_refuses_unnameable_functions_too() -> None:
    with pytest.raises(TypeError, match="lambda"):
        Registry().register(name="x")(lambda: None)


@pytest.mark.parametrize("name", ["", " padded ", 42, b"bytes"])
def test_bad_names_are_refused(name: Any) -> None:
    with pytest.raises(ValueError, match="a function's name must be a non-empty str"):
        Registry().register(other, name)


# -- lookup ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["os:system", "no.such:thing", "", 42])
def test_get_raises_function_not_registered_naming_it(name: Any) -> None:
    reg = Registry()
    reg.register(remind)
    with pytest.raises(FunctionNotRegistered, match=f"no function is registered as {name!r}"):
        reg.get(name)
    with pytest.raises(LookupError):
        reg.get(name)


def test_name_of_an_unregistered_function() -> None:
    with pytest.raises(FunctionNotRegistered, match="is not registered"):
        Registry().name_of(remind)
    with pytest.raises(FunctionNotRegistered):
        Registry().name_of([])  # type: ignore[arg-type]


def test_nothing_is_imported_from_a_stored_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "htask_trap_module.py").write_text(
        f"open({str(marker)!r}, 'w').close()\ndef run():\n    return 'ran'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = encode_call("htask_trap_module:run")
    with pytest.raises(FunctionNotRegistered, match="'htask_trap_module:run'"):
        Registry().call(data)
    with pytest.raises(FunctionNotRegistered):
        Registry().check_call("htask_trap_module:run")
    assert not marker.exists()
    assert "htask_trap_module" not in sys.modules


# -- autodiscover --------------------------------------------------------------------------------


def _package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, **modules: str) -> None:
    """An importable package ``name`` holding ``modules`` (module name -> source)."""
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for module, source in modules.items():
        (package / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))


def test_autodiscover_imports_modules_and_skips_missing_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = """
        from django_htask.engine import registry

        @registry.register(name="htask_discover_app.ping")
        def ping() -> str:
            return "pong"
    """
    _package(tmp_path, monkeypatch, "htask_discover_app", tasks=tasks)
    monkeypatch.setattr(registry_module.registry, "_entries", dict(registry._entries))
    monkeypatch.setattr(registry_module.registry, "_names", dict(registry._names))
    imported = registry.autodiscover(
        ["htask_discover_app.tasks", "htask_discover_app.missing", "htask_no_such_app.tasks"]
    )
    assert imported == ["htask_discover_app.tasks"]
    assert registry.call(encode_call("htask_discover_app.ping")) == "pong"
    assert registry.autodiscover("htask_discover_app.tasks") == ["htask_discover_app.tasks"]
    for module in ("htask_discover_app.tasks", "htask_discover_app"):
        monkeypatch.delitem(sys.modules, module)


def test_autodiscover_propagates_errors_inside_a_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _package(
        tmp_path,
        monkeypatch,
        "htask_broken_app",
        tasks="import htask_dependency_that_is_missing\n",
        other="raise RuntimeError('broken on import')\n",
    )
    with pytest.raises(ModuleNotFoundError, match="htask_dependency_that_is_missing"):
        Registry().autodiscover(["htask_broken_app.tasks"])
    with pytest.raises(RuntimeError, match="broken on import"):
        Registry().autodiscover(["htask_broken_app.other"])
    monkeypatch.delitem(sys.modules, "htask_broken_app")


# -- bind, call, check_call ------------------------------------------------------------------------


def test_check_call_returns_the_payload_and_call_runs_it() -> None:
    reg = Registry()
    reg.register(remind)
    data = reg.check_call(NAME, [42, "tea"], {"when": WHEN, "tags": ["a", "b"]})
    assert data == encode_call(NAME, [42, "tea"], {"when": WHEN, "tags": ["a", "b"]})
    assert reg.call(data) == f"42:tea:{WHEN.isoformat()}:a,b"
    fn, args, kwargs = reg.bind(*decode_call(data))
    assert fn is remind
    assert args == (42, "tea") and kwargs == {"when": WHEN, "tags": ("a", "b")}
    assert type(kwargs["tags"]) is tuple


def test_check_call_fails_in_the_caller() -> None:
    reg = Registry()
    reg.register(remind)
    with pytest.raises(FunctionNotRegistered):
        reg.check_call("tasks:nope", [1])
    with pytest.raises(PayloadError, match=r'kwargs\["when"\]: its type is not supported'):
        reg.check_call(NAME, [1, "x"], {"when": object()})
    with pytest.raises(
        ArgumentError, match=f"{NAME}\\(\\) parameter 'when' expects datetime, got str"
    ):
        reg.check_call(NAME, [1, "x"], {"when": "tomorrow"})
    with pytest.raises(ArgumentError, match="missing required argument: 'when'"):
        reg.check_call(NAME, [1, "x"])
    with pytest.raises(ArgumentError, match="got an unexpected keyword argument 'at'"):
        reg.check_call(NAME, [1, "x", WHEN], {"at": 1})


def test_check_call_binds_what_a_worker_will_decode() -> None:
    # a list sent for a tuple-typed parameter binds after the trip, as a worker sees it
    reg = Registry()
    reg.register(remind)
    reg.check_call(NAME, [1, "x", WHEN], {"tags": ["a"]})


def test_call_passes_the_functions_errors_through() -> None:
    reg = Registry()
    reg.register(explode)
    with pytest.raises(RuntimeError, match="boom"):
        reg.call(reg.check_call(default_name(explode)))


def test_call_runs_async_functions_to_completion() -> None:
    reg = Registry()
    reg.register(remind_later)
    assert reg.call(reg.check_call(default_name(remind_later), [21])) == 42


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"\xc1", PayloadError),
        (encode_call("t:nope", [1]), FunctionNotRegistered),
        (encode_call(NAME, ["x", "y", WHEN]), ArgumentError),
    ],
)
def test_call_refuses_before_calling(data: bytes, error: type[Exception]) -> None:
    reg = Registry()
    reg.register(remind)
    with pytest.raises(error):
        reg.call(data)


def test_the_payload_size_limit_is_configurable() -> None:
    reg = Registry(max_payload_size=100)
    reg.register(other)
    name = default_name(other)
    big = encode_call(name, [1], {"pad": "x" * 200})
    with pytest.raises(PayloadError, match="over the limit of 100"):
        reg.check_call(name, [1], {"pad": "x" * 200})
    with pytest.raises(PayloadError, match="over the limit of 100"):
        reg.call(big)
    assert reg.call(reg.check_call(name, [7])) == 7
    assert Registry().max_payload_size == 1 << 20


@pytest.mark.parametrize("size", [0, -1, 1.5, "10", True])
def test_a_bad_size_limit_is_refused(size: Any) -> None:
    with pytest.raises(ValueError, match=f"max_payload_size must be a positive int, got {size!r}"):
        Registry(max_payload_size=size)


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names the registry builds a Binder for, in order."""
    names: list[str] = []

    class CountingBinder(Binder):
        def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
            names.append(name or "")
            super().__init__(fn, name)

    monkeypatch.setattr(registry_module, "Binder", CountingBinder)
    return names


def test_the_binder_is_built_once_per_function(built: list[str]) -> None:
    reg = Registry()
    reg.register(remind)
    reg.register(remind, "alias")
    data = reg.check_call(NAME, [1, "x", WHEN])
    for _ in range(50):
        reg.call(data)
        reg.bind(NAME, [1, "x", WHEN])
        reg.check_call(NAME, [1, "x", WHEN])
    assert built == [NAME]
    reg.call(encode_call("alias", [1, "x", WHEN]))
    assert built == [NAME, "alias"]
    assert reg.binder(NAME) is reg.binder(NAME)


# -- thread safety --------------------------------------------------------------------------------


def _module_level_functions(count: int) -> list[Callable[..., Any]]:
    """Distinct plain functions, named as if each were defined at module level."""
    return [_numbered_function(index) for index in range(count)]


def _numbered_function(index: int) -> Callable[..., Any]:
    def fn(n: int) -> int:
        return n + index

    fn.__qualname__ = fn.__name__ = f"fn_{index}"
    return fn


def test_concurrent_registration_and_lookup() -> None:
    reg = Registry()
    reg.register(other, "stable")
    functions = _module_level_functions(800)
    start = threading.Barrier(5)
    errors: list[BaseException] = []
    stop = threading.Event()

    def register(part: list[Callable[..., Any]]) -> None:
        start.wait()
        try:
            for fn in part:
                reg.register(fn)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def look_up() -> None:
        start.wait()
        try:
            while not stop.is_set():
                assert reg.get("stable") is other
                for fn in functions[:50]:
                    # not registered yet is fine; another function never is
                    with contextlib.suppress(FunctionNotRegistered):
                        assert reg.get(default_name(fn)) is fn
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    registrars = [threading.Thread(target=register, args=(functions[i::4],)) for i in range(4)]
    reader = threading.Thread(target=look_up)
    for thread in [*registrars, reader]:
        thread.start()
    for thread in registrars:
        thread.join(timeout=60)
    stop.set()
    reader.join(timeout=60)
    assert not errors
    assert len(reg) == 801
    assert all(reg.get(default_name(fn)) is fn for fn in functions)


def test_concurrent_registration_of_one_name_has_one_winner() -> None:
    reg = Registry()
    functions = _module_level_functions(16)
    start = threading.Barrier(16)
    outcomes: list[str] = []
    lock = threading.Lock()

    def register(fn: Callable[..., Any]) -> None:
        start.wait()
        try:
            reg.register(fn, "contested")
            outcome = "won"
        except ValueError:
            outcome = "refused"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=register, args=(fn,)) for fn in functions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["refused"] * 15 + ["won"]
    assert reg.get("contested") in functions


def test_concurrent_first_calls_build_one_binder(built: list[str]) -> None:
    reg = Registry()
    reg.register(remind)
    data = encode_call(NAME, [1, "x", WHEN])
    start = threading.Barrier(8)
    results: list[str] = []

    def work() -> None:
        start.wait()
        results.append(reg.call(data))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 8 and len(set(results)) == 1
    assert built == [NAME]


# -- hostile input: only the documented errors escape ------------------------------------------


class Mood(enum.Enum):
    CALM = "calm"
    ANGRY = 2


@dataclasses.dataclass
class Tree:
    children: list[Tree]
    v: int = 0


@dataclasses.dataclass
class Labelled:
    children: list[Tree | Labelled]
    v: str = ""


class Span(NamedTuple):
    start: datetime
    length: timedelta = timedelta()


def typed_scalars(
    i: int,
    f: float,
    s: str,
    b: bytes,
    d: Decimal,
    when: datetime,
    day: date,
    at: time,
    u: uuid.UUID,
    mood: Mood,
    flag: bool = False,
) -> None: ...


def typed_containers(
    a: list[int],
    b: dict[str, set[int]],
    c: tuple[int, str],
    d: frozenset[str] = frozenset(),
    *rest: Decimal,
    **extra: float,
) -> None: ...


def typed_trees(
    tree: Tree,
    either: Tree | Labelled | None = None,
    span: Span | None = None,
    pick: Literal["a", 1, Mood.CALM] = "a",
) -> None: ...


def untyped(a, b=None, *args, **kwargs):  # type: ignore[no-untyped-def]
    return None


async def typed_async(n: int, *, when: datetime | None = None) -> int:
    return n


HOSTILE = Registry()
for _fn in (typed_scalars, typed_containers, typed_trees, untyped, typed_async):
    HOSTILE.register(_fn)
NAMES = HOSTILE.names()
PARAMS = sorted(
    {"i", "f", "s", "b", "d", "when", "day", "at", "u", "mood", "flag", "a", "c", "tree"}
    | {"either", "span", "pick", "n", "rest", "extra", "args", "kwargs"}
)
DOCUMENTED = (PayloadError, FunctionNotRegistered, ArgumentError)

# What msgpack can carry, valid or not for us: any ext type with any data, odd map
# keys, NaN, the ends of the int range.
# (msgpack.ExtType takes codes 0 to 127 only: test_codec covers a broken timestamp, -1.)
_EXT_CODES = st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 42, 127])
_WIRE_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([-(2**63), 2**64 - 1, 2**63, 0]),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.builds(msgpack.ExtType, _EXT_CODES, st.binary(max_size=17)),
    st.builds(
        msgpack.ExtType,
        st.sampled_from([1, 2, 3, 4]),
        st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]).map(
            lambda n: struct.pack(">q", n)
        ),
    ),
    st.builds(
        msgpack.ExtType, st.just(5), st.sampled_from([b"1.5", b"sNaN", b"-Inf", b"1e999999"])
    ),
)


def _wire_containers(kids: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.one_of(st.sampled_from([*PARAMS, "children", "v", "start"]), st.text(max_size=4))
    odd_keys = st.one_of(keys, st.binary(max_size=3), st.integers(-3, 3), st.none())
    return st.one_of(
        st.lists(kids, max_size=4),
        st.dictionaries(keys, kids, max_size=4),
        st.dictionaries(odd_keys, kids, max_size=3),
        st.builds(
            lambda code, items: msgpack.ExtType(code, msgpack.packb(items)),
            st.sampled_from([7, 8, 9]),
            st.lists(kids, max_size=3),
        ),
    )


_WIRE_VALUES = st.recursive(_WIRE_LEAVES, _wire_containers, max_leaves=12)


@st.composite
def _wire_calls(draw: st.DrawFn) -> bytes:
    """msgpack bytes of ``[name, args, kwargs]``, sometimes bent out of that shape."""
    name = draw(st.one_of(st.sampled_from(NAMES), st.text(max_size=8), _WIRE_VALUES))
    args = draw(st.one_of(st.lists(_WIRE_VALUES, max_size=5), _WIRE_VALUES))
    kwargs = draw(
        st.one_of(
            st.dictionaries(st.sampled_from(PARAMS), _WIRE_VALUES, max_size=5),
            _WIRE_VALUES,
        )
    )
    call = draw(st.sampled_from([[name, args, kwargs], [name, args], [name, args, kwargs, 0]]))
    data: bytes = msgpack.packb(call)
    cut = draw(st.one_of(st.none(), st.integers(0, len(data))))
    return data if cut is None else data[:cut]


@settings(max_examples=1_000, suppress_health_check=[HealthCheck.too_slow])
@given(_wire_calls())
def test_call_and_decode_raise_only_documented_errors_on_any_bytes(data: bytes) -> None:
    decoded = _documented(lambda: decode_call(data))
    error = _documented(lambda: HOSTILE.call(data))  # or what the function returned
    if isinstance(decoded, tuple):  # decoded: bind fails (or not) as call did
        bound = _documented(lambda: HOSTILE.bind(*decoded))
        if isinstance(error, Exception):
            assert type(bound) is type(error)
        else:  # the call ran (typed_async returns its n): so must binding succeed
            assert isinstance(bound, tuple)
    else:
        assert isinstance(decoded, PayloadError)
        assert type(error) is PayloadError


def _documented(attempt: Callable[[], Any]) -> Any:
    """What ``attempt()`` returns, or the documented error it raises (any other escapes)."""
    try:
        return attempt()
    except DOCUMENTED as exc:
        error = exc
    assert len(str(error)) < 1_000, error
    return error


class Unsupported:
    pass


# What a caller might pass: Python values of every kind, supported or not.
_PY_LEAVES = st.one_of(
    _WIRE_LEAVES,
    st.integers(),
    st.sampled_from([10**4000, -(10**30), 2**64]),
    st.builds(pow, st.just(10), st.just(5000)),  # str() refuses ints past 4,300 digits
    st.decimals(allow_nan=True, allow_infinity=True),
    st.sampled_from([Decimal("sNaN"), "\ud800", "a\udcff", float("nan")]),
    st.datetimes(timezones=st.one_of(st.none(), st.just(UTC), st.just(timezone.max))),
    st.dates(),
    st.times(timezones=st.one_of(st.none(), st.just(UTC))),
    st.timedeltas(),
    st.uuids(),
    st.sampled_from(list(Mood)),
    st.builds(Unsupported),
    st.builds(Tree, st.just([]), st.integers(-5, 5)),
    st.builds(msgpack.Timestamp, st.integers(0, 2**32)),
)


def _py_containers(kids: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.one_of(st.text(max_size=4), st.sampled_from(["children", "v", "start"]))
    hashable = st.one_of(st.integers(-3, 3), st.text(max_size=3), st.none(), st.booleans())
    return st.one_of(
        st.lists(kids, max_size=4),
        st.lists(kids, max_size=3).map(tuple),
        st.frozensets(hashable, max_size=3),
        st.sets(hashable, max_size=3),
        st.dictionaries(keys, kids, max_size=3),
        st.dictionaries(st.one_of(keys, hashable, st.tuples(hashable)), kids, max_size=3),
        st.builds(Tree, st.lists(st.builds(Tree, st.just([])), max_size=2)),
    )


_PY_VALUES = st.recursive(_PY_LEAVES, _py_containers, max_leaves=12)


@settings(max_examples=1_000, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(st.sampled_from(NAMES), st.text(max_size=6), st.integers(), st.none()),
    st.one_of(st.lists(_PY_VALUES, max_size=5), _PY_VALUES),
    st.one_of(
        st.none(),
        st.dictionaries(st.sampled_from(PARAMS), _PY_VALUES, max_size=5),
        st.dictionaries(st.one_of(st.integers(), st.text(max_size=3)), _PY_VALUES, max_size=2),
        _PY_VALUES,
    ),
)
def test_bind_and_check_call_raise_only_documented_errors_on_any_values(
    name: Any, args: Any, kwargs: Any
) -> None:
    for attempt in (HOSTILE.bind, HOSTILE.check_call):
        _documented(lambda: attempt(name, args, kwargs))  # noqa: B023 - called at once


def _tree(nodes: int) -> dict[str, Any]:
    node: dict[str, Any] = {"children": [], "v": 0}
    for _ in range(nodes - 1):
        node = {"children": [node], "v": 1}
    return node


def test_deep_and_cyclic_values_raise_documented_errors_everywhere() -> None:
    name = default_name(typed_trees)
    HOSTILE.check_call(name, [_tree(MAX_NESTING // 2)])  # 100 levels: the limit
    deep = _tree(510)  # the example: RecursionError before
    loop: dict[str, Any] = {"children": [], "v": 1}
    loop["children"].append(loop)
    for value in (_tree(MAX_NESTING // 2 + 1), deep, loop):
        with pytest.raises(ArgumentError, match="containers nest deeper than 100 levels"):
            HOSTILE.bind(name, [value])
        with pytest.raises(PayloadError, match=r"nest deeper than 100 levels|contains itself"):
            HOSTILE.check_call(name, [value])
    with pytest.raises(PayloadError, match="containers nest deeper than 100 levels at args"):
        HOSTILE.call(msgpack.packb([name, [deep], {}]))


def test_unregistered_names_are_named_shortly() -> None:
    for attempt in (
        lambda: HOSTILE.call(msgpack.packb(["x" * 100_000, [], {}])),
        lambda: HOSTILE.bind("x" * 100_000),
        lambda: HOSTILE.check_call("x" * 100_000),
    ):
        with pytest.raises(FunctionNotRegistered) as info:
            attempt()
        assert len(str(info.value)) < 200


def test_an_async_function_called_from_a_running_loop_raises_runtime_error() -> None:
    data = HOSTILE.check_call(default_name(typed_async), [3])
    assert HOSTILE.call(data) == 3

    async def inside_a_loop() -> None:
        with pytest.raises(RuntimeError, match="typed_async is an async function and this"):
            HOSTILE.call(data)

    asyncio.run(inside_a_loop())  # and no "coroutine was never awaited" warning (an error)
