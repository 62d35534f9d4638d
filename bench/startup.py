"""What a ``runscheduler`` process spends starting, and how much of it is Django's.

Each case runs in a fresh process, the cases taking turns, ``--rounds`` times, with
the settings ``bench/cluster.py`` gives its django-htask nodes
(``tests.cluster.bench_settings``, on a throw-away PostgreSQL cluster); the CPU of
each process (user + system, from its exit) is printed as the median and the range.
Each process ends as a node's does, with ``os._exit``, without tearing the interpreter
down (which costs more than some of the cases):

* ``python``: an empty interpreter;
* ``django``: ``django.setup()`` with those settings, django-htask and the test app
  taken out of ``INSTALLED_APPS`` (``contenttypes`` and ``auth`` stay): what any
  Django project's process spends before its own code;
* ``django + htask``: the same with every app of the settings;
* ``+ runscheduler``: and the ``runscheduler`` command's module imported (the node,
  the engine);
* ``node, 1 task``: ``manage.py runscheduler --max-tasks 1`` with one task queued,
  from exec to its exit: the whole life of a node that runs one task.

    python bench/startup.py                 # 9 rounds
    python bench/startup.py --url postgresql://postgres@127.0.0.1:5432/htask
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
from collections.abc import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchutil import compile_sources  # noqa: E402

SETTINGS = "tests.cluster.bench_settings"
FUNCTION = "tests.cluster.clusterapp.tasks:noop"
OURS = ("django_htask", "tests.cluster.clusterapp")


#: How a node's process ends (runscheduler's ``run_from_argv``): at once, without
#: tearing the interpreter down, which would cost more than some of the cases.
EXIT = "import os\nos._exit(0)\n"


def _setup(without: tuple[str, ...]) -> str:
    """Code that sets Django up with the bench's settings, ``without`` those apps."""
    return (
        "import importlib, django\nfrom django.conf import settings\n"
        f"s = importlib.import_module({SETTINGS!r})\n"
        "values = {k: getattr(s, k) for k in dir(s) if k.isupper()}\n"
        f"values['INSTALLED_APPS'] = [a for a in s.INSTALLED_APPS if a not in {without!r}]\n"
        "settings.configure(**values)\ndjango.setup()\n"
    )


CASES: dict[str, list[str]] = {
    "python": ["-c", EXIT],
    "django": ["-c", _setup(OURS) + EXIT],
    "django + htask": ["-c", _setup(()) + EXIT],
    "+ runscheduler": [
        "-c",
        _setup(()) + "import django_htask.management.commands.runscheduler\n" + EXIT,
    ],
    "node, 1 task": ["-m", "django", "runscheduler", "--max-tasks", "1"],
}
QUEUE_ONE = (
    f"import django\ndjango.setup()\nfrom django_htask import schedule\nschedule({FUNCTION!r}, 0)\n"
)


def _cpu(argv: list[str], env: dict[str, str]) -> float:
    """Milliseconds of CPU of the process ``argv`` runs (it must exit 0)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000 * (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from tests.pgcluster import PostgresCluster

    with PostgresCluster() as pg:
        yield pg.url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--url", help="a PostgreSQL database to use (default: a fresh cluster)")
    args = parser.parse_args()
    compile_sources(ROOT)
    with _database(args.url) as url:
        env = dict(
            os.environ, DJANGO_SETTINGS_MODULE=SETTINGS, HTASK_CLUSTER_DB_URL=url, PYTHONPATH=ROOT
        )
        py = sys.executable
        subprocess.run([py, "-m", "django", "migrate", "-v0"], env=env, check=True, cwd=ROOT)
        cpu: dict[str, list[float]] = {case: [] for case in CASES}
        for _ in range(args.rounds):
            for case, argv in CASES.items():
                if case.startswith("node"):
                    subprocess.run([py, "-c", QUEUE_ONE], env=env, check=True, cwd=ROOT)
                cpu[case].append(_cpu([py, *argv], env))
    print(f"CPU of a fresh process, ms: median (range) of {args.rounds}, {SETTINGS}")
    med = {case: statistics.median(xs) for case, xs in cpu.items()}
    for case, xs in cpu.items():
        print(f"  {case:<16} {med[case]:6.0f}  ({min(xs):.0f}-{max(xs):.0f})")
    print(
        f"  django's own share of a node's run: {med['django'] / med['node, 1 task']:.0%}; "
        f"django-htask's setup and imports: "
        f"{med['+ runscheduler'] - med['django']:.0f} ms"
    )


if __name__ == "__main__":
    main()
