"""The wiring of Django's ``tests/tasks/`` onto HtaskBackend (not a test module).

Django's tests name three backends; the ports put ours in their place:

- :class:`StoredBackend` where they use ``DummyBackend`` (tasks stored, never run):
  HtaskBackend with no node, plus the two helpers those tests read, ``results`` and
  ``clear()``, answered from the database;
- :class:`NodeBackend` where they use ``ImmediateBackend`` (a task has run when
  ``enqueue`` returns): HtaskBackend whose ``enqueue`` returns once a real
  :class:`~django_htask.node.Node`, started on the test database at the first
  enqueue, has run the task, with the result refreshed from the database.

:class:`HtaskTestCase` replaces ``SimpleTestCase``: a ``TransactionTestCase``, since
the backend stores in the database and the node's threads read what the test
committed; it stops the node after each test, before the tables are emptied.
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar
from unittest import mock

from django.db import router, transaction
from django.tasks import TaskResult
from django.test import TransactionTestCase

from django_htask.backends import RUNNER, HtaskBackend
from django_htask.models import Task, TaskStatus
from django_htask.node import Node

__all__ = ["NODE_BACKEND", "STORED_BACKEND", "HtaskTestCase", "NodeBackend", "StoredBackend"]

#: How long NodeBackend.enqueue waits for the node to finish a task, in seconds.
RUN_TIMEOUT = 10.0

_nodes: list[Node] = []


class StoredBackend(HtaskBackend):
    """HtaskBackend with DummyBackend's ``results`` and ``clear()`` for the tests."""

    @property
    def results(self) -> list[TaskResult[Any, Any]]:
        """Every Django task stored, oldest first, as ``get_result`` reads it."""
        tokens = Task.objects.filter(function=RUNNER).order_by("id").values_list("token", flat=True)
        return [self.get_result(token) for token in tokens]

    def clear(self) -> None:
        Task.objects.filter(function=RUNNER).delete()


class NodeBackend(StoredBackend):
    """HtaskBackend whose ``enqueue`` returns once a node has run the task (at once
    when called outside a transaction; inside one, the task runs when it commits)."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        result = super().enqueue(task, args, kwargs)
        if not transaction.get_connection(router.db_for_write(Task)).in_atomic_block:
            _running_node()  # started at the first enqueue: it loads what is due
            _wait_finished(result.id)
            result.refresh()
        return result


STORED_BACKEND = f"{__name__}.StoredBackend"
NODE_BACKEND = f"{__name__}.NodeBackend"


def _running_node() -> Node:
    if not _nodes:
        node = Node(node_id=f"django-tests-{os.getpid()}", workers=2, poll_interval=0.2)
        node.start()
        _nodes.append(node)
    return _nodes[0]


def _wait_finished(token: str) -> None:
    """Wait until the node has written the task's end (polls the row every 10 ms)."""
    done = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)
    deadline = time.monotonic() + RUN_TIMEOUT
    while not Task.objects.filter(token=token, status__in=done).exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"the node did not finish task {token} in {RUN_TIMEOUT}s")
        time.sleep(0.01)


def stop_nodes() -> None:
    while _nodes:
        _nodes.pop().stop(timeout=5)


class HtaskTestCase(TransactionTestCase):
    """The base of the ported test cases (see the module's docstring).

    ``sync_in_async`` names the async tests that call a synchronous database API
    (``get_result()``, ``refresh()``) inside their event loop, which Django forbids
    unless ``DJANGO_ALLOW_ASYNC_UNSAFE`` is set: Django's own tests do it against
    in-memory backends, where it touches no database."""

    sync_in_async: ClassVar[frozenset[str]] = frozenset()

    def _setup_and_call(self, result: Any, debug: bool = False) -> None:
        if self._testMethodName not in self.sync_in_async:
            super()._setup_and_call(result, debug)
            return
        with mock.patch.dict(os.environ, {"DJANGO_ALLOW_ASYNC_UNSAFE": "true"}):
            super()._setup_and_call(result, debug)

    def _post_teardown(self) -> None:
        stop_nodes()
        super()._post_teardown()
