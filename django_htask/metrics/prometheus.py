"""What the metrics' collectors share: the guard that names what to install when
prometheus-client is missing (it is imported only when metrics are asked for), the
window of the ``django_htask_recent_*`` series and the histograms' buckets."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

__all__ = ["DURATION_BUCKETS", "INSTALL", "LATENESS_BUCKETS", "WINDOW", "require_prometheus"]

#: What to install when prometheus-client is missing.
INSTALL = "pip install django-htask[metrics]"
#: The seconds of runs the ``django_htask_recent_*`` series count: the last hour.
WINDOW = 3600.0
#: The buckets (upper bounds, seconds) of the run duration histograms.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
#: The buckets (seconds) of the lateness histogram: from due to started.
LATENESS_BUCKETS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


def require_prometheus() -> None:
    """Raise :class:`~django.core.exceptions.ImproperlyConfigured` naming what to
    install unless ``prometheus_client`` can be imported."""
    try:
        import prometheus_client  # noqa: F401, PLC0415
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"django-htask's metrics need the prometheus-client package: {INSTALL}"
        ) from exc
