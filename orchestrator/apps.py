from django.apps import AppConfig


class OrchestratorConfig(AppConfig):
    name = "orchestrator"
    verbose_name = "Orchestrator (the orchestrated saga)"

    def ready(self) -> None:
        from orchestrator import operations

        operations.register()
