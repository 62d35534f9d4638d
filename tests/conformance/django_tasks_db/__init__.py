"""django-tasks-db's own tests of its worker (``db_worker``) and backend
(django-tasks-db 0.13.0, ``tests/tests.py``), ported to run against
:class:`~django_htask.backends.HtaskBackend` and ``manage.py runscheduler``: in the test
process (``call_command``) and as a ``runscheduler`` subprocess. The wiring is in
:mod:`.wiring`; each change, each test not ported and each deliberate difference is
listed in docs/django-tasks.md ("django-tasks-db's tests"), and
``test_coverage.py`` checks that the list and the ports cover every test of the source."""
