"""PostgreSQL's triggers (:func:`~django_htask.store.postgres.install` creates them):
a schedule's ``version`` from the writing transaction's id (see
:mod:`~django_htask.store.postgres`, *Versions*), and a ``NOTIFY`` on the channel
:data:`~django_htask.store.listen.CHANNEL` for every statement that changes a schedule,
a task or a node (*Notifications*), unless the transaction set :data:`QUIET` on, and a
``NOTIFY`` on :data:`~django_htask.store.listen.ENDED` with the token of each task that
someone waits for (``waited``) as it ends: the sending side of LISTEN/NOTIFY, whose
listening side is :mod:`~django_htask.store.listen`.
:data:`FINGERPRINT` tells whether the triggers in a database are these."""

from __future__ import annotations

import hashlib

from django.db.backends.utils import CursorWrapper

from django_htask.models import Node, Queue, Schedule, Task
from django_htask.retention import FINAL_STATUSES

from .listen import CHANNEL, ENDED

__all__ = ["FINGERPRINT", "PER_XACT", "QUIET", "SEQ", "STATEMENTS", "TRIGGERS", "current"]

SCHEDULE = Schedule._meta.db_table
TASK = Task._meta.db_table
NODE = Node._meta.db_table
QUEUE = Queue._meta.db_table
#: The statuses a task ends in, as SQL.
_ENDED = ", ".join(f"'{status}'" for status in FINAL_STATUSES)

#: Transaction-local setting that silences the NOTIFY triggers for node bookkeeping.
QUIET = "django_htask.quiet"
#: Transaction-local count of the schedule rows written, so versions grow inside one
#: transaction too: version = transaction id * PER_XACT + the row's rank (capped).
SEQ = "django_htask.seq"
PER_XACT = 1 << 16


def _statements() -> tuple[str, ...]:
    notify_triggers = []
    for table, payload, events in (
        (SCHEDULE, "schedule", "INSERT OR UPDATE OR DELETE"),
        (TASK, "task", "INSERT OR UPDATE OR DELETE"),
        # not every heartbeat: only a node joining, stopping or declared dead
        (NODE, "node", "INSERT OR UPDATE OF stopped_at OR DELETE"),
        # a queue paused, resumed or limited (pause_queue, the admin)
        (QUEUE, "queue", "INSERT OR UPDATE OR DELETE"),
    ):
        # A table a migration has not made yet (the install that migration 0001 runs)
        # gets its trigger at the install after migrate: until then TRIGGERS are not
        # all there, and current() says so.
        notify_triggers.append(
            f"DO $$ BEGIN IF to_regclass('{table}') IS NOT NULL THEN "
            f"DROP TRIGGER IF EXISTS {table}_notify ON {table}; "
            f"CREATE TRIGGER {table}_notify AFTER {events} ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION django_htask_notify('{payload}'); "
            "END IF; END $$"
        )
    # A row trigger, but its WHEN clause is false for every task nobody waits for, and
    # PostgreSQL then queues no event: the nodes' writes of ends cost nothing more. Made
    # once the column is there (an install before migration 0023 skips it).
    ended_trigger = (
        "DO $$ BEGIN IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = "
        f"to_regclass('{TASK}') AND attname = 'waited' AND NOT attisdropped) THEN "
        f"DROP TRIGGER IF EXISTS {TASK}_ended ON {TASK}; "
        f"CREATE TRIGGER {TASK}_ended AFTER UPDATE OF status ON {TASK} FOR EACH ROW "
        f"WHEN (NEW.waited AND NEW.status IN ({_ENDED}) "
        "AND OLD.status IS DISTINCT FROM NEW.status) "
        "EXECUTE FUNCTION django_htask_ended(); "
        "END IF; END $$"
    )
    return (
        f"""
        CREATE OR REPLACE FUNCTION django_htask_version() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            seq bigint;
        BEGIN
            IF TG_OP = 'INSERT' OR NEW.version IS NOT DISTINCT FROM OLD.version THEN
                seq := coalesce(nullif(current_setting('{SEQ}', true), ''), '0')::bigint + 1;
                PERFORM set_config('{SEQ}', seq::text, true);
                NEW.version := pg_current_xact_id()::text::bigint * {PER_XACT}
                    + least(seq, {PER_XACT - 1});
            END IF;
            RETURN NEW;
        END $$
        """,
        f"""
        CREATE OR REPLACE FUNCTION django_htask_notify() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF coalesce(current_setting('{QUIET}', true), '') <> 'on' THEN
                PERFORM pg_notify('{CHANNEL}', TG_ARGV[0]);
            END IF;
            RETURN NULL;
        END $$
        """,
        f"""
        CREATE OR REPLACE FUNCTION django_htask_ended() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{ENDED}', NEW.token);
            RETURN NULL;
        END $$
        """,
        f"DROP TRIGGER IF EXISTS {SCHEDULE}_version ON {SCHEDULE}",
        f"CREATE TRIGGER {SCHEDULE}_version BEFORE INSERT OR UPDATE ON {SCHEDULE} "
        "FOR EACH ROW EXECUTE FUNCTION django_htask_version()",
        *notify_triggers,
        ended_trigger,
    )


STATEMENTS = _statements()
#: Names the triggers :data:`STATEMENTS` create and their text: stored as the comment of
#: ``django_htask_notify()``, so a node starting finds them current without a lock.
TRIGGERS = (
    f"{NODE}_notify",
    f"{QUEUE}_notify",
    f"{SCHEDULE}_notify",
    f"{SCHEDULE}_version",
    f"{TASK}_ended",
    f"{TASK}_notify",
)
FINGERPRINT = "django_htask triggers " + hashlib.sha256("\n".join(STATEMENTS).encode()).hexdigest()


def current(cursor: CursorWrapper) -> bool:
    """Whether the triggers are in place and are the ones this code creates (reads
    only the catalogue: takes no lock on the tables)."""
    cursor.execute(
        "SELECT obj_description(to_regprocedure('django_htask_notify()'), 'pg_proc'),"
        " (SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal AND tgname = ANY(%s))",
        [list(TRIGGERS)],
    )
    row = cursor.fetchone()
    return row is not None and row[0] == FINGERPRINT and row[1] == len(TRIGGERS)
