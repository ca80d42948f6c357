"""Where the operator's page about a correlation id is: the bus's admin links its rows there.

The bus knows no page of its own project; an app registers ``link(correlation_id)`` (the URL of
its page about that id, or None when the id is not one of its own) from its ``AppConfig.ready()``.
"""

from collections.abc import Callable

_correlation_links: list[Callable[[str], str | None]] = []


def register_correlation_link(link: Callable[[str], str | None]) -> None:
    _correlation_links.append(link)


def correlation_url(correlation_id: str) -> str | None:
    for link in _correlation_links:
        if url := link(correlation_id):
            return url
    return None
