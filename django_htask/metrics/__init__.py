"""Metrics in Prometheus' text format: what the database knows, for the URL module's
``metrics/`` and ``runscheduler --metrics-port``, and, in a node's process, what that
node did (:class:`NodeMetrics`).

Collection and exposition are apart: :mod:`~django_htask.metrics.database` reads the
database (:class:`DatabaseCollector`), :mod:`~django_htask.metrics.counters` counts a
node's signals (:class:`NodeMetrics`); this module serves them (:func:`render` for the
view, :func:`serve` for ``runscheduler --metrics-port``), on private registries.

It needs ``prometheus-client`` (``pip install django-htask[metrics]``), imported in
this package only and only when metrics are asked for: importing django_htask does not
need it. Every series is listed in docs/operating.md ("Metrics").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .counters import NodeMetrics
from .database import DatabaseCollector
from .prometheus import DURATION_BUCKETS, INSTALL, LATENESS_BUCKETS, WINDOW, require_prometheus

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "DURATION_BUCKETS",
    "INSTALL",
    "LATENESS_BUCKETS",
    "WINDOW",
    "DatabaseCollector",
    "MetricsServer",
    "NodeMetrics",
    "database_registry",
    "render",
    "require_prometheus",
    "serve",
]


def database_registry(*, using: str | None = None, window: float = WINDOW) -> Any:
    """A new private :class:`prometheus_client.CollectorRegistry` (never the global
    one) holding a :class:`DatabaseCollector`."""
    require_prometheus()
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(using=using, window=window))
    return registry


def render(registry: CollectorRegistry | None = None) -> tuple[bytes, str]:
    """The scrape of ``registry`` (default: :func:`database_registry`) in Prometheus'
    text format, and its content type."""
    require_prometheus()
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

    return generate_latest(registry or database_registry()), CONTENT_TYPE_LATEST


@dataclass
class MetricsServer:
    """The HTTP server of :func:`serve`: where it listens; :meth:`close` stops it."""

    host: str
    port: int
    node_metrics: NodeMetrics
    _server: Any
    _thread: Any

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self.node_metrics.disconnect()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve(
    port: int,
    addr: str = "127.0.0.1",
    *,
    node_id: str,
    using: str | None = None,
    window: float = WINDOW,
) -> MetricsServer:
    """Serve, on ``addr:port`` (``port`` 0: any free one) in a thread, the metrics of
    the database and the counters of the node ``node_id`` in this process, on a
    private registry. Raises ImproperlyConfigured without prometheus-client, OSError
    when the address cannot be bound."""
    require_prometheus()
    from prometheus_client import CollectorRegistry, start_http_server  # noqa: PLC0415

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(using=using, window=window, refresh_connections=True))
    node_metrics = NodeMetrics(node_id, registry)
    server, thread = start_http_server(port, addr=addr, registry=registry)
    node_metrics.connect()
    host, bound = server.server_address[:2]
    return MetricsServer(str(host), int(bound), node_metrics, server, thread)
