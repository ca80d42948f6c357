from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    """Installed only when ``BENCH_APP`` is set (config/settings.py); its context.toml declares
    its consumer like any context's."""

    name = "bench.benchapp"
    label = "benchapp"
    default_auto_field = "django.db.models.BigAutoField"
