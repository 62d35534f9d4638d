"""The example's home page: the engine's live counters."""

from django.http import HttpRequest, HttpResponse

from . import engine_demo


def home(request: HttpRequest) -> HttpResponse:
    stats = engine_demo.stats()
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in stats.items())
    return HttpResponse(
        "<!doctype html><title>django-htask example</title>"
        "<h1>django-htask example</h1>"
        f"<p>Heartbeats fired by the in-process engine: <b>{engine_demo.beats()}</b></p>"
        f"<table>{rows}</table><p><a href='/admin/'>Admin</a></p>"
    )
