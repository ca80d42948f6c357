"""Who may publish what: with ``BROKER_PRODUCERS`` each context's events come from its own broker user.

RabbitMQ does the checking that matters: topic permissions let a context's user publish only its
own routing keys to the events exchange (``manage.py broker_permissions``), and a message's AMQP
``user_id``, when set, must be the publishing connection's user or the broker refuses it. Every
message this project publishes carries its connection's user (``publisher.BatchPublisher``). A
consumer then refuses what no owner published: a message whose ``user_id`` is not the user
``BROKER_PRODUCERS`` names for the context its routing key belongs to (the first segment: seed
000's ``context.entity.event``), nor this deployment's own user (its retries and its operators'
replays carry that one). With one shared user (no ``BROKER_PRODUCERS``) nothing is checked.

What this cannot stop: a context's own user can feed that context's own queues (as its retries
do) through the default exchange. Keep each user's password with its deployment only.
"""

from reliable_messaging._conf import setting

UNAUTHENTICATED = "unauthenticated_producer"


def owner_of(event_type: str) -> str:
    """The context whose events carry ``event_type`` (its first segment)."""
    return event_type.split(".", 1)[0]


def producer_refusal(event_type: str, user_id: object) -> str | None:
    """Why a message of ``event_type`` published by broker user ``user_id`` is refused; None when
    it is not (or when no producers are configured)."""
    producers: dict[str, str] = setting("PRODUCERS")
    if not producers:
        return None
    context = owner_of(event_type)
    owner = producers.get(context)
    if isinstance(user_id, str) and user_id and user_id in (owner, setting("BROKER_USER")):
        return None
    publisher = f"whose broker user is {owner!r}" if owner else "to which BROKER_PRODUCERS gives no broker user"
    return f"{event_type} belongs to {context}, {publisher}; this message's user_id is {user_id!r}"
