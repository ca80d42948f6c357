"""Every queue of the system and the routing keys bound to it, read from the installed
contexts' declarations (``reliable_messaging._declarations``): a context named ``N`` has the queue ``N_queue``,
bound to exactly the keys it declares under ``consumes``.

Every relay and every consumer process declares all of it, whatever its deployment hosts: the
declarations of the contexts hosted elsewhere are in its tree too. So a message always has a
queue to wait in, even when its consumer's deployment has never started yet (an unbound key
would reach only the event log, or on the filesystem broker nothing at all).

Besides the contexts' queues there is messaging's own event log, the consumer ``events``: bound
to every key, it runs where a hosted context declares ``event_log = true``.
"""

from reliable_messaging._declarations import installed

ANY_EVENT = "#"
EVENT_LOG_CONSUMER = "events"


def queue_bindings() -> dict[str, tuple[str, ...]]:
    """Consumer -> the keys its queue is bound to, in the installed order, the event log last."""
    declarations = installed()
    bindings = {d.name: tuple(sorted(d.consumes)) for d in declarations if d.consumes}
    if any(d.event_log for d in declarations):
        bindings[EVENT_LOG_CONSUMER] = (ANY_EVENT,)
    return bindings


def consumers() -> list[str]:
    return list(queue_bindings())


def subscribers_of(event_type: str) -> list[str]:
    """The consumers whose queue receives ``event_type``, in declaration order."""
    return [c for c, keys in queue_bindings().items() if event_type in keys or ANY_EVENT in keys]
