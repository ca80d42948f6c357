"""What each hosted context adds to the operator's views: ``/metrics`` gauges, overview sections
and panels on an order's page.

A context registers its pieces from its ``AppConfig.ready()``; ``config`` (the composition
root) renders whatever was registered. So the root imports no context, and a deployment
shows exactly the contexts it hosts.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from prometheus_client.core import Metric
from reliable_messaging.operator import register_correlation_link

__all__ = ["register_correlation_link"]  # the bus's admin links a correlation id to its page


@dataclass(frozen=True)
class OverviewSection:
    """A block of the saga overview page: ``template`` rendered with what ``context(now)`` returns."""

    key: str
    template: str
    context: Callable[[datetime], dict]


_sections: dict[str, OverviewSection] = {}
_gauges: dict[str, Callable[[], Iterable[Metric]]] = {}


def register_overview_section(section: OverviewSection) -> None:
    _sections[section.key] = section


def overview_sections() -> list[OverviewSection]:
    return list(_sections.values())


def register_database_gauges(key: str, collect: Callable[[], Iterable[Metric]]) -> None:
    """``collect`` reads the database at every scrape and yields metric families; a
    ``DatabaseError`` it raises turns ``shop_database_up`` to 0 instead of failing the scrape."""
    _gauges[key] = collect


def database_gauges() -> list[Callable[[], Iterable[Metric]]]:
    return list(_gauges.values())


@dataclass(frozen=True)
class OrderPanel:
    """A block of an order's admin page, beside its swimlane: ``template`` rendered with what
    ``context(order_id)`` returns (None: nothing to show for that order, e.g. not orchestrated)."""

    key: str
    template: str
    context: Callable[[str], dict | None]


_order_panels: dict[str, OrderPanel] = {}


def register_order_panel(panel: OrderPanel) -> None:
    _order_panels[panel.key] = panel


def order_panels(order_id: str) -> list[tuple[str, dict]]:
    """(template, context) of each panel that has something to show about ``order_id``."""
    shown = []
    for panel in _order_panels.values():
        if (context := panel.context(order_id)) is not None:
            shown.append((panel.template, context))
    return shown
