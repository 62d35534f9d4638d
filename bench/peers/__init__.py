"""The trivial job of ``bench/cluster.py``'s peers: procrastinate's in ``tasks``
(installed as an app, it finds it there), django-q2's in ``qtasks``, Oban for
Python's in ``oban_jobs``."""
