"""A handler whose dependency is over the network: an HTTP server the test runs, at
``OUTAGE_DEPENDENCY_URL``. Each call is appended to ``OUTAGE_CALLS_FILE`` (start time, note id,
answer), as the process that makes it sees it: a refused connection never reaches the server."""

import os
import time
import urllib.error
import urllib.request

from reliable_messaging.api import IncomingEvent, TransientError


def on_note_written(event: IncomingEvent) -> None:
    note_id = event.payload["note_id"]
    started = time.time()
    try:
        with urllib.request.urlopen(f"{os.environ['OUTAGE_DEPENDENCY_URL']}/{note_id}", timeout=5) as answer:
            status = str(answer.status)
    except urllib.error.HTTPError as exc:  # before URLError: its subclass
        status = str(exc.code)
    except OSError as exc:  # refused (a URLError naming its reason), timed out
        status = type(getattr(exc, "reason", exc)).__name__
    with open(os.environ["OUTAGE_CALLS_FILE"], "a") as calls:
        calls.write(f"{started:.3f} {note_id} {status}\n")
    if status != "200":
        raise TransientError(f"the dependency answered {status}")
