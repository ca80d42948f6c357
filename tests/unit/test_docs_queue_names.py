"""docs/adding-a-context.md names only queues and exchanges that reliable_messaging._broker declares for a context."""

import re
from pathlib import Path

from django.conf import settings
from reliable_messaging import _broker as broker
from reliable_messaging._conf import queue_name

RECIPE = Path(settings.BASE_DIR) / "docs" / "adding-a-context.md"


def declared_for(consumer: str) -> set[str]:
    return {
        queue_name(consumer),
        broker.dead_letter_exchange(consumer).name,
        broker.dead_letter_queue_name(consumer),
        broker.retry_queue_name(consumer, 1.5),
    }


def test_every_queue_the_recipe_names_is_one_the_broker_declares():
    # `N_queue...` in the rules, `<name>_queue...` under "Removing a context"; `<ms>` stands for a delay.
    named = re.findall(r"`(?:N|<name>)(_queue[\w<>]*)`", RECIPE.read_text())
    written = {f"x{suffix}".replace("<ms>", "1500") for suffix in named}

    assert written == declared_for("x")
