from reliable_messaging.api import IncomingEvent, TransientError

from retrying.handlers import FAILING_CALLS, record


def on_note_written(event: IncomingEvent) -> None:
    record("breaking", event)
    if FAILING_CALLS["breaking"] > 0:
        FAILING_CALLS["breaking"] -= 1
        raise TransientError("the gateway does not answer")
