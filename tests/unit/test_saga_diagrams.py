"""docs/sagas.md draws both sagas as their definitions have them (reliable_messaging.sagas.diagram)."""

from pathlib import Path

from reliable_messaging.sagas import diagram

from orchestrator.services import order_saga
from orders.services.returns import return_saga

SAGAS_DOC = Path(__file__).resolve().parents[2] / "docs" / "sagas.md"


def test_the_sagas_page_shows_the_diagram_of_each_definition():
    page = SAGAS_DOC.read_text()
    for saga in (order_saga(), return_saga()):
        assert f"```mermaid\n{diagram(saga)}```\n" in page, saga.name
