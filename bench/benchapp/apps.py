from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    """Installed only when ``BENCH_APP`` is set (see the last block of config/settings.py)."""

    name = "bench.benchapp"
    label = "benchapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from bench.benchapp.handlers import register

        register()
