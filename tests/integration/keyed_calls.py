"""What each process of the keys' concurrency test runs (tests/integration/
test_keys_processes.py), as ``python -m tests.integration.keyed_calls DATABASE PROCESS
CALLS``: Django set up on the test database ``DATABASE``, ``ready`` printed; then, for
each phase, once the test writes a line to its stdin (all processes at once), ``CALLS``
calls of ``schedule(ADD, call_id, key=...)``, each followed, in its transaction, by the
update of the phase's counter row. That row's lock is taken after the task's (which the
upsert holds to the commit), so the counter's order is the order in which the calls
committed. Prints a JSON line per phase: the tokens returned."""

from __future__ import annotations

import json
import os
import sys

COUNTER = "htask_test_key_commits"
ADD = "tests.integration.testapp.tasks:add"
#: The phases, in order: (the key, on_conflict, the counter row).
PHASES = (("ignored", "ignore", 1), ("replaced", "replace", 2))


def main(database: str, process: int, calls: int) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.integration.keyed_settings"
    import django

    django.setup()
    from django.db import connection, transaction

    from django_htask import schedule

    connection.settings_dict["NAME"] = database
    connection.ensure_connection()
    print("ready", flush=True)
    for key, on_conflict, row in PHASES:
        sys.stdin.readline()
        tokens = []
        for i in range(calls):
            call_id = process * 1000 + i
            with transaction.atomic(), connection.cursor() as cursor:
                task = schedule(ADD, call_id, key=key, on_conflict=on_conflict)
                cursor.execute(
                    f"UPDATE {COUNTER} SET n = n + 1, last = %s, "
                    "first = COALESCE(first, %s) WHERE id = %s",
                    [call_id, call_id, row],
                )
            tokens.append(task.token)
        print(json.dumps(tokens), flush=True)
    connection.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
