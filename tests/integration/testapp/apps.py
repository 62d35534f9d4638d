from django.apps import AppConfig


class TestappConfig(AppConfig):
    name = "tests.integration.testapp"
    label = "htask_testapp"
