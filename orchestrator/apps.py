from django.apps import AppConfig
from django.core import checks

from orchestrator.conf import setting


class OrchestratorConfig(AppConfig):
    name = "orchestrator"
    verbose_name = "Orchestrator (the orchestrated saga)"

    def ready(self) -> None:
        from reliable_messaging import sagas

        from orchestrator import operations
        from orchestrator.services import order_saga

        sagas.register(order_saga())
        operations.register()
        checks.register(step_deadlines_within_the_saga_deadline)


def step_deadlines_within_the_saga_deadline(**_) -> list[checks.CheckMessage]:
    """The orchestrator gives a step up after ORCHESTRATOR_STEP_ATTEMPTS sends ORCHESTRATOR_STEP_TIMEOUT
    apart, then compensates; orders' own deadline fails the order at SAGA_TIMEOUT. If the first
    comes later, the orchestrator's give-up never runs."""
    steps = setting("ORCHESTRATOR_STEP_TIMEOUT") * setting("ORCHESTRATOR_STEP_ATTEMPTS")
    if steps < setting("SAGA_TIMEOUT"):
        return []
    return [
        checks.Warning(
            f"ORCHESTRATOR_STEP_TIMEOUT x ORCHESTRATOR_STEP_ATTEMPTS ({steps:g} s) is not under SAGA_TIMEOUT "
            f"({setting('SAGA_TIMEOUT'):g} s): orders' deadline fails an unanswered order before the orchestrator "
            "gives its step up and compensates",
            hint="shorten the step timeout or the attempts, or lengthen SAGA_TIMEOUT",
            id="orchestrator.W001",
        )
    ]
