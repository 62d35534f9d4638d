"""The models' manager, which reads and writes the scheduler's database, and the
managers of the models whose rows have rules (:mod:`django_htask.querysets`)."""

from __future__ import annotations

from typing import TypeVar

from django.db import models

from django_htask.db import configured_alias
from django_htask.querysets import NodeQuerySet, QueueQuerySet, RunQuerySet, TaskQuerySet

M = TypeVar("M", bound=models.Model)


class SchedulerManager(models.Manager[M]):
    """The models' manager: with ``HTASK["DATABASE"]`` set, its querysets read and write
    there unless told otherwise (``db_manager``, ``using``), router or not, so
    ``Task.objects...`` and Django's own queries through it (a form's unique checks, the
    admin) find the tables. A new instance's ``save()`` follows the routers: pass
    ``using=`` or add :class:`django_htask.routers.HtaskRouter`."""

    def get_queryset(self) -> models.QuerySet[M]:
        queryset = super().get_queryset()
        database = None if self._db else configured_alias()
        return queryset.using(database) if database else queryset


#: The managers of the models whose rows have rules (:mod:`django_htask.querysets`).
TaskManager = SchedulerManager.from_queryset(TaskQuerySet)
RunManager = SchedulerManager.from_queryset(RunQuerySet)
NodeManager = SchedulerManager.from_queryset(NodeQuerySet)
QueueManager = SchedulerManager.from_queryset(QueueQuerySet)
