"""Django's own tests of ``django.tasks`` (``tests/tasks/`` of the Django release
installed, 6.0), ported to run against :class:`~django_htask.backends.HtaskBackend`
with a real node running the tasks. Only the wiring differs from Django's files
(:mod:`.wiring`); each change and each skip is listed in docs/django-tasks.md."""
