from reliable_messaging.api import IncomingEvent, TransientError

from retrying.handlers import record


def on_note_written(event: IncomingEvent) -> None:
    if record("twin", event).startswith("failing"):
        raise TransientError("the twin's shelf is busy")
