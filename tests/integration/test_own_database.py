"""The scheduler's tables in a database of their own (issue 26, item 3): the alias
``"queue"`` of the test settings, named by ``HTASK["DATABASE"]``, with the router
(``router``) or without it (``setting``). The tables exist on both test databases
(migrated without a router), so each test checks that rows land on "queue" and not on
"default". ``migrate`` and a real node: tests/acceptance/test_own_database.py."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command, execute_from_command_line
from django.db import connections, transaction
from django.test import Client, override_settings

from django_htask import cancel, get_result, schedule
from django_htask.admin.overview.data import read_overview
from django_htask.db import holds_tables, scheduler_alias
from django_htask.decorators import sync_schedules
from django_htask.engine import FakeClock
from django_htask.health import check_health
from django_htask.models import Node, Run, Schedule, Task, TaskStatus
from django_htask.routers import HtaskRouter
from django_htask.store import get_store
from tests.integration.node_rows import node_row
from tests.integration.test_admin import ADD, form_data, make
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db(databases=["default", "queue"])

URL = "/admin/django_htask/"
ROUTER = "django_htask.routers.HtaskRouter"


class Rollback(Exception):
    pass


@pytest.fixture(params=["router", "setting"])
def own(request: pytest.FixtureRequest, settings: Any) -> str:
    """HTASK["DATABASE"] = "queue", with HtaskRouter (``router``) or without."""
    settings.HTASK = {**settings.HTASK, "DATABASE": "queue"}
    if request.param == "router":
        settings.DATABASE_ROUTERS = [ROUTER]
    return str(request.param)


@pytest.fixture
def admin_client_() -> Client:
    user = User.objects.db_manager("default").create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def on(alias: str, model: type[Any]) -> Any:
    return model._default_manager.db_manager(alias)


# -- the alias -------------------------------------------------------------------------
def test_the_alias_is_the_setting_else_the_routers(settings: Any) -> None:
    assert scheduler_alias() == "default"
    settings.DATABASE_ROUTERS = [ROUTER]
    assert scheduler_alias() == "default"  # the router follows the setting: unset, None
    settings.HTASK = {**settings.HTASK, "DATABASE": "queue"}
    assert scheduler_alias() == "queue"
    assert (holds_tables("default"), holds_tables("queue")) == (False, True)


def test_a_bad_setting_says_which_value(settings: Any) -> None:
    settings.HTASK = {**settings.HTASK, "DATABASE": "nope"}
    with pytest.raises(ImproperlyConfigured, match=r"'nope', which is not an alias"):
        scheduler_alias()
    found = {m.id: m.msg for m in checks.run_checks() if (m.id or "").startswith("django_htask")}
    assert "'nope'" in found["django_htask.E009"]
    assert "'default', 'queue'" in found["django_htask.E009"]
    settings.HTASK = {**settings.HTASK, "DATABASE": 3}
    found = {m.id: m.msg for m in checks.run_checks() if (m.id or "").startswith("django_htask")}
    expected = "HTASK['DATABASE'] must be None or a DATABASES alias, got 3"
    assert expected in found["django_htask.E002"]
    assert "django_htask.E009" not in found


def test_the_setting_without_the_router_is_a_warning(own: str) -> None:
    found = [m for m in checks.run_checks() if m.id == "django_htask.W010"]
    if own == "router":
        assert found == []
    else:
        assert len(found) == 1
        assert "HtaskRouter" in str(found[0].hint)
        assert "'queue'" in found[0].msg


def test_the_router_routes_only_django_htask() -> None:
    router = HtaskRouter()
    assert router.db_for_read(Task) is None  # no setting: the next router decides
    assert router.allow_migrate("queue", "django_htask") is None
    with override_settings(HTASK={"DATABASE": "queue"}):
        assert router.db_for_read(Task) == router.db_for_write(Run) == "queue"
        assert router.db_for_read(User) is None
        assert router.allow_migrate("queue", "django_htask", "task") is True
        assert router.allow_migrate("default", "django_htask", "task") is False
        assert router.allow_migrate("queue", "auth", "user") is None
        assert router.allow_relation(Task(), Run()) is True
        assert router.allow_relation(Task(), User()) is None


# -- schedule(), cancel(), get_result() -------------------------------------------------
def rolled_back(alias: str, a: int) -> Task:
    """The task ``schedule(add, a)`` made in a transaction on ``alias`` rolled back."""
    made: list[Task] = []
    try:
        with transaction.atomic(using=alias):
            made.append(schedule(tasks.add, a))
            raise Rollback
    except Rollback:
        pass
    return made[0]


def test_schedule_is_in_the_transaction_on_the_queue_alias(own: str) -> None:
    with transaction.atomic(using="queue"):
        task = schedule(tasks.add, 1)
        assert on("queue", Task).filter(pk=task.pk).exists()
    assert not on("default", Task).filter(token=task.token).exists()
    gone = rolled_back("queue", 2)
    assert not on("queue", Task).filter(token=gone.token).exists()
    # A transaction on "default" does not cover a task on "queue".
    kept = rolled_back("default", 3)
    assert on("queue", Task).filter(token=kept.token).exists()
    result = get_result(task.token)
    assert result is not None
    assert result.status == TaskStatus.PENDING
    assert cancel(kept.token)
    assert on("queue", Task).get(token=kept.token).status == TaskStatus.CANCELLED


def test_code_defined_schedules_sync_to_the_queue_alias(own: str) -> None:
    sync_schedules()
    assert on("queue", Schedule).filter(name="testapp-minutely").exists()
    assert not on("default", Schedule).filter(name="testapp-minutely").exists()


# -- the admin --------------------------------------------------------------------------
def test_the_admin_reads_and_writes_the_queue_alias(
    own: str, admin_client_: Client, fake_clock: FakeClock
) -> None:
    response = admin_client_.post(f"{URL}schedule/add/", form_data(name="own-nightly"))
    assert response.status_code == 302, response.content.decode()[:2000]
    row = on("queue", Schedule).get(name="own-nightly")
    assert not on("default", Schedule).filter(name="own-nightly").exists()
    listing = admin_client_.get(f"{URL}schedule/").content.decode()
    assert "own-nightly" in listing
    # a change saved there, and an action on the rows there
    page = admin_client_.get(f"{URL}schedule/{row.pk}/change/")
    assert page.status_code == 200
    changed = form_data(name="own-nightly", description="from the admin")
    response = admin_client_.post(f"{URL}schedule/{row.pk}/change/", changed)
    assert response.status_code == 302
    assert on("queue", Schedule).get(pk=row.pk).description == "from the admin"
    admin_client_.post(f"{URL}schedule/", {"action": "disable", "_selected_action": [row.pk]})
    assert on("queue", Schedule).get(pk=row.pk).enabled is False
    # a task: listed, moved, cancelled by an action
    task = schedule(tasks.add, 1, delay=60)
    assert str(task.pk) in admin_client_.get(f"{URL}task/").content.decode()
    page = admin_client_.get(f"{URL}task/{task.pk}/change/")
    assert page.status_code == 200
    admin_client_.post(f"{URL}task/", {"action": "cancel_tasks", "_selected_action": [task.pk]})
    assert on("queue", Task).get(pk=task.pk).status == TaskStatus.CANCELLED
    # the nodes' list and the overview
    node_row("own-node", fake_clock.now())
    assert "own-node" in admin_client_.get(f"{URL}node/").content.decode()
    overview = admin_client_.get(f"{URL}overview/")
    assert overview.status_code == 200
    assert "own-node" in overview.content.decode()


# Without the router the delete confirmation asks the routers for the related rows
# (W010 says so): deleting is covered with the router.
@pytest.mark.parametrize("own", ["router"], indirect=True)
def test_the_admin_deletes_on_the_queue_alias(own: str, admin_client_: Client) -> None:
    row = make("doomed")
    assert on("queue", Schedule).filter(pk=row.pk).exists()
    response = admin_client_.post(f"{URL}schedule/{row.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not on("queue", Schedule).filter(pk=row.pk).exists()


# -- the htask command, health, the overview, the store ----------------------------------
def htask(*args: str) -> str:
    out = StringIO()
    call_command("htask", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_htask_status_and_list_read_the_queue_alias(own: str, fake_clock: FakeClock) -> None:
    # A new instance's save() follows the routers: without one, say where.
    row = Schedule(name="own-listed", function=ADD, schedule="@daily")
    row.set_call((1,))
    row.save(using=scheduler_alias())
    node_row("own-node", fake_clock.now())
    schedule(tasks.add, 1)
    assert "own-listed" in htask("list")
    status = htask("status")
    assert "nodes: 1 live" in status
    assert "own-node" in status
    assert "tasks: 1 pending" in status
    # --database picks another alias (the tables exist on both test databases)
    assert "no schedules" in htask("--database", "default", "list")
    with pytest.raises(CommandError, match=r"--database is 'nope', which is not an alias"):
        htask("--database", "nope", "list")


def test_health_overview_and_store_follow_the_alias(own: str, fake_clock: FakeClock) -> None:
    node_row("own-node", fake_clock.now())
    schedule(tasks.add, 1)
    assert check_health(node="own-node").healthy
    assert not check_health(node="own-node", using="default").healthy
    assert read_overview().tasks["pending"] == 1
    store = get_store()
    assert store.using == "queue"
    assert str(connections["queue"].settings_dict["NAME"]) in store.describe()
    assert on("queue", Node).count() == 1


# -- a node -----------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True, databases=["default", "queue"])
@pytest.mark.parametrize("own", ["router"], indirect=True)
def test_runscheduler_runs_the_tasks_of_the_queue_alias(
    own: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # On PostgreSQL the node listens on a connection to the "queue" database.
    task = schedule(tasks.add, 2, b=3)
    execute_from_command_line(["manage.py", "runscheduler", "--batch", "--node-id", "own-b"])
    assert "nothing is due any more (--batch)" in capsys.readouterr().out
    done = on("queue", Task).get(pk=task.pk)
    assert done.status == TaskStatus.SUCCEEDED
    assert get_result(task.token).value == 5  # type: ignore[union-attr]
    assert on("queue", Node).filter(id="own-b").exists()
    assert not on("default", Node).exists()
    assert on("queue", Schedule).filter(name="testapp-minutely").exists()  # synced there
    assert not on("default", Schedule).exists()
