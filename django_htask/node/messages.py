"""The messages between a node and its worker processes (:mod:`~django_htask.node.child`,
:mod:`~django_htask.node.processes`), one named type each, pickled over the two
channels of a worker process.

Data channel, node to child: :class:`Hello`, then :class:`Run` and :class:`Exit`;
child to node: :class:`Ready` or :class:`Broken`, then a :class:`Done` per run.
Control channel, node to child: :class:`Cancel` and :class:`Force`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["OWN_PYTHONPATH", "Broken", "Cancel", "Done", "Exit", "Force", "Hello", "Ready", "Run"]

#: The environment variable where a worker process finds its node's own PYTHONPATH,
#: if it had one: the pool starts the child with the node's ``sys.path`` there.
OWN_PYTHONPATH = "HTASK_OWN_PYTHONPATH"


class Hello(NamedTuple):
    """The child's settings: its databases and its limits."""

    config: dict[str, Any]


class Ready(NamedTuple):
    """Django is set up in the child, whose pid this is."""

    pid: int


class Broken(NamedTuple):
    """Django could not be set up in the child: the traceback."""

    error: str


class Run(NamedTuple):
    """Make ``call`` (an :class:`~django_htask.node.execution.Call`), run ``seq`` of
    this child."""

    seq: int
    call: Any


class Done(NamedTuple):
    """How run ``seq`` ended: its outcome's fields (the result already encoded, so its
    size is checked in the child and only bytes cross) and ``recycle``, why the child
    exits after it (its ``max_tasks`` or ``max_memory``), or ``""``."""

    seq: int
    status: str
    error: str
    traceback: str
    duration: float | None
    result: bytes | None
    extra: dict[str, object]
    recycle: str


class Exit(NamedTuple):
    """End between two runs."""


class Cancel(NamedTuple):
    """Cancel run ``seq``'s token (the cooperative stop), saying why."""

    seq: int
    reason: str
    retryable: bool


class Force(NamedTuple):
    """Raise :class:`~django_htask.engine.ForcedStop` in run ``seq``'s call."""

    seq: int
