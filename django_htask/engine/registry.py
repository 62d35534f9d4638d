"""The function registry: only registered functions run, found by their name.

A stored task names its function (``"myapp.tasks:send_reminder"``); a worker looks the
name up here and never imports anything from a stored string. ::

    from django_htask.engine import registry

    @registry.register
    def send_reminder(user_id: int, when: datetime) -> None: ...

    data = registry.check_call("myapp.tasks:send_reminder", [42], {"when": when})
    ...
    registry.call(data)  # decodes, converts to the declared types, calls

Registration takes a lock; lookups take none (the table is replaced, never mutated).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import logging
import threading
import types
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, overload

from .binding import Binder
from .codec import DEFAULT_MAX_SIZE, decode_call, decode_result, encode_call
from .errors import ArgumentError, FunctionNotRegistered, short_repr

__all__ = ["Registry", "registry"]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


class _Entry:
    """One registered name: its function and, once needed, its binder."""

    __slots__ = ("binder", "fn", "is_async", "name")

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self.binder: Binder | None = None


def default_name(fn: Callable[..., Any]) -> str:
    """``"package.module:qualname"``, the name a function is registered under by default."""
    return f"{fn.__module__}:{fn.__qualname__}"


def _refuse_unless_plain_function(fn: Any) -> None:
    """Raise TypeError unless ``fn`` is a function a worker can find by name."""
    if isinstance(fn, (functools.partial, functools.partialmethod)):
        raise TypeError(
            f"cannot register {fn!r}: a functools.partial has no name of its own; "
            "register a module-level function that calls it"
        )
    if inspect.ismethod(fn):
        raise TypeError(
            f"cannot register bound method {fn.__qualname__} of {fn.__self__!r}: "
            "register a module-level function (or a staticmethod) instead"
        )
    if not callable(fn):
        raise TypeError(f"cannot register {fn!r}: it is not callable")
    if not isinstance(fn, types.FunctionType):
        raise TypeError(
            f"cannot register {fn!r} ({type(fn).__name__}): only functions defined with "
            "def at module level (or staticmethods) can be registered"
        )
    if fn.__name__ == "<lambda>":
        raise TypeError(
            f"cannot register the lambda {default_name(fn)}: a lambda has no stable name; "
            "define it with def at module level"
        )
    if "<locals>" in fn.__qualname__:
        raise TypeError(
            f"cannot register {default_name(fn)}: it is defined inside a function, so a "
            "worker cannot find it; define it at module level"
        )


class Registry:
    """Names to functions, with one precompiled :class:`Binder` per name.

    ``max_payload_size`` (bytes) limits what :meth:`check_call` encodes and
    :meth:`call` decodes.
    """

    def __init__(self, *, max_payload_size: int = DEFAULT_MAX_SIZE) -> None:
        if type(max_payload_size) is not int or max_payload_size <= 0:
            raise ValueError(f"max_payload_size must be a positive int, got {max_payload_size!r}")
        self.max_payload_size = max_payload_size
        self._lock = threading.Lock()
        # Both replaced under the lock, never mutated: lookups need no lock.
        self._entries: dict[str, _Entry] = {}
        self._names: dict[Callable[..., Any], str] = {}

    def __repr__(self) -> str:
        return f"<Registry of {len(self._entries)} functions>"

    # -- registration -------------------------------------------------------------

    @overload
    def register(self, fn: F, name: str | None = None) -> F: ...
    @overload
    def register(self, fn: str | None = None, name: str | None = None) -> Callable[[F], F]: ...
    def register(self, fn: F | str | None = None, name: str | None = None) -> F | Callable[[F], F]:
        """Register ``fn`` as ``name`` (default ``"package.module:qualname"``); return it.

        Also a decorator: ``@registry.register``, ``@registry.register("name")`` or
        ``@registry.register(name="name")``. Lambdas, partials, functions defined inside
        functions, bound methods and non-functions raise ``TypeError``; registering a
        different function under a taken name raises ``ValueError``. Registering the same
        function under the same name again does nothing; one function may have several
        names (keep an old name working after a rename).
        """
        if fn is None or isinstance(fn, str):
            given = fn if isinstance(fn, str) else name

            def decorator(func: F) -> F:
                return self.register(func, given)

            return decorator
        self._add(fn, name)
        return fn

    def _add(self, fn: Callable[..., Any], name: str | None) -> None:
        _refuse_unless_plain_function(fn)
        if name is None:
            name = default_name(fn)
        elif type(name) is not str or not name or name.strip() != name:
            raise ValueError(
                f"a function's name must be a non-empty str without surrounding spaces, "
                f"got {name!r}"
            )
        with self._lock:
            existing = self._entries.get(name)
            if existing is not None:
                if existing.fn is fn:
                    return
                raise ValueError(
                    f"{name!r} is already registered to {existing.fn!r}; "
                    f"cannot register {fn!r} under it"
                )
            self._entries = {**self._entries, name: _Entry(name, fn)}
            if fn not in self._names:
                self._names = {**self._names, fn: name}
        logger.debug("registered %s", name, extra={"action": "registry.register"})

    def autodiscover(self, modules: Iterable[str]) -> list[str]:
        """Import each module named (for their ``@register`` side effects).

        A module that does not exist is skipped, so a list like every installed app's
        ``tasks`` module can be passed as is; an error raised *inside* an existing
        module (including a failing import of its own) propagates. Returns the names of
        the modules imported.
        """
        if isinstance(modules, str):
            modules = [modules]
        imported = []
        for module in modules:
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as exc:
                missing = exc.name or ""
                if module != missing and not module.startswith(missing + "."):
                    raise
                logger.debug(
                    "no module %s", module, extra={"action": "registry.autodiscover_missing"}
                )
                continue
            imported.append(module)
            logger.debug("imported %s", module, extra={"action": "registry.autodiscover"})
        return imported

    # -- lookup -------------------------------------------------------------------

    def _entry(self, name: str) -> _Entry:
        entry = self._entries.get(name) if type(name) is str else None
        if entry is None:
            raise FunctionNotRegistered(f"no function is registered as {short_repr(name)}")
        return entry

    def get(self, name: str) -> Callable[..., Any]:
        """The function registered as ``name``; ``FunctionNotRegistered`` names it if none."""
        return self._entry(name).fn

    def is_async(self, name: str) -> bool:
        """Whether ``name`` is a registered ``async def`` function (False if it is not
        registered)."""
        entry = self._entries.get(name) if type(name) is str else None
        return entry is not None and entry.is_async

    def name_of(self, fn: Callable[..., Any]) -> str:
        """The (first) name ``fn`` is registered under; ``FunctionNotRegistered`` if none."""
        try:
            return self._names[fn]
        except (KeyError, TypeError):
            raise FunctionNotRegistered(f"{fn!r} is not registered") from None

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def binder(self, name: str) -> Binder:
        """The :class:`Binder` of ``name``, built on first use and then kept."""
        entry = self._entry(name)
        binder = entry.binder
        if binder is None:
            with self._lock:
                binder = entry.binder
                if binder is None:
                    binder = entry.binder = Binder(entry.fn, entry.name)
        return binder

    # -- calls --------------------------------------------------------------------

    def bind(
        self, name: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
    ) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """``(fn, args, kwargs)`` with the arguments converted to the declared types.

        Raises ``FunctionNotRegistered`` or ``ArgumentError``.
        """
        entry = self._entry(name)
        binder = entry.binder or self.binder(name)
        bound_args, bound_kwargs = binder.bind(args, kwargs)
        return entry.fn, bound_args, bound_kwargs

    def call(self, data: bytes | bytearray | memoryview) -> Any:
        """Decode a payload, bind its arguments and call the function; return its result.

        An ``async def`` function is run to completion with :func:`asyncio.run`. Raises
        ``PayloadError``, ``FunctionNotRegistered`` or ``ArgumentError`` before calling
        (``RuntimeError`` for an async function called from a running event loop), and
        whatever the function raises.
        """
        name, args, kwargs = decode_call(data, max_size=self.max_payload_size)
        entry = self._entry(name)
        binder = entry.binder or self.binder(name)
        bound_args, bound_kwargs = binder.bind(args, kwargs)
        if entry.is_async:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # none: the usual case, in a worker thread
                return asyncio.run(entry.fn(*bound_args, **bound_kwargs))
            raise RuntimeError(
                f"{name} is an async function and this thread runs an event loop: "
                "asyncio.run cannot run it here; await the function instead"
            )
        return entry.fn(*bound_args, **bound_kwargs)

    def read_result(self, name: str, data: bytes | bytearray | memoryview) -> Any:
        """A stored result of the function registered as ``name``, decoded and converted
        to its declared return type. Raises ``PayloadError`` (bytes that are not a
        result), ``FunctionNotRegistered`` or ``ArgumentError`` (the value does not fit
        the declared type: the function changed since it ran)."""
        value = decode_result(data)
        binder = self.binder(name)
        return binder.result(value)

    def check_call(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        later: Collection[str] = (),
    ) -> bytes:
        """Validate a call without running it; return its payload (the encoded call).

        Checks that ``name`` is registered, that the values can travel (encodes them, at
        most ``max_payload_size`` bytes) and that what a worker will decode binds to the
        function's parameters (those named in ``later`` get their values afterwards:
        see :meth:`Binder.check_later`). Raises ``FunctionNotRegistered``,
        ``PayloadError`` or ``ArgumentError`` in the caller, not later in a worker.
        """
        return self.check_call_argument(name, args, kwargs, later=later)[0]

    def check_call_argument(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        param: str | None = None,
        later: Collection[str] = (),
    ) -> tuple[bytes, Any]:
        """:meth:`check_call`, and the value the parameter ``param`` takes in the call
        as a worker binds it (converted to its type; its default if not given; None
        without ``param``). LookupError naming ``param`` if the function has no such
        parameter; ArgumentError naming it if it is one of ``later`` (its value is not
        known yet)."""
        if param is not None and param in later:
            raise ArgumentError(
                f"{name}() parameter {param!r} cannot receive a result: its value is "
                "needed when the task is stored"
            )
        binder = self.binder(name)
        data = encode_call(name, args, kwargs, max_size=self.max_payload_size)
        _name, decoded_args, decoded_kwargs = decode_call(data, max_size=self.max_payload_size)
        if later:
            bound, bound_kwargs = binder.check_later(decoded_args, decoded_kwargs, later)
        else:
            bound, bound_kwargs = binder.bind(decoded_args, decoded_kwargs)
        value = None if param is None else binder.argument(param, bound, bound_kwargs)
        return data, value


#: The default registry, the one the Django layer uses.
registry = Registry()
