"""kombu's filesystem transport (the embedded broker), with its two write races closed.

- A message: kombu's ``_put`` creates ``<data>/<name>.<queue>.msg`` and only then locks and
  writes it, while ``_get`` takes a file by renaming it (a lock does not stop a rename) and reads
  it at once. A consumer that lists the folder in between takes an empty file: drain_events raises
  ``JSONDecodeError``, the consumer exits and the message is gone (the symptom of kombu issue
  #1551). Here a message is written under a name no queue matches and renamed into place, which
  is atomic within one folder: a consumer sees a whole message or none.
- A binding: kombu creates a new exchange's table with ``open("wb")``, so two processes declaring
  their queues at once on a new folder each truncate the other's binding away, and the events
  for the lost queue are routed nowhere. Here the table is created without truncating and read,
  changed and written under its lock.
"""

import contextlib
import os
import uuid
from collections.abc import Callable
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps, loads

PARTIAL_SUFFIX = ".writing"  # never ``.<queue>.msg``: no consumer takes a message being written

Table = list[filesystem.exchange_queue_t]  # an exchange's bindings


def folders_writable(*folders: str | os.PathLike[str]) -> bool:
    """Whether a message could be written into each folder now: a probe file is written the way
    ``_put`` writes one (under a name no queue takes) and removed. An existing folder is not
    enough: a full disk, a read-only mount or an immutable folder refuse every publish."""
    for folder in folders:
        probe = os.path.join(folder, f".probe-{uuid.uuid4()}{PARTIAL_SUFFIX}")
        try:
            with open(probe, "wb") as file:
                file.write(b"{}")
            os.remove(probe)
        except OSError:
            return False
    return True


class Channel(filesystem.Channel):
    # kombu's own filesystem Channel names _put's second parameter "payload", its base class "message".
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{name}{PARTIAL_SUFFIX}")
        try:
            with open(partial, "wb") as file:
                file.write(dumps(payload).encode())
            os.replace(partial, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(partial)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _queue_bind(self, exchange: str, routing_key: str | None, pattern: str | None, queue: str | None) -> None:
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        self._change_table(exchange, lambda table: table if binding in table else [binding, *table])

    def queue_unbind(
        self,
        queue: str,
        exchange: str | None = None,
        routing_key: str = "",
        arguments: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Out of the exchange's file: kombu's own unbind edits only a copy it read."""
        self.state.binding_delete(queue, exchange, routing_key)
        self._change_table(
            exchange, lambda table: [r for r in table if (r.routing_key, r.queue) != (routing_key, queue)]
        )

    def _change_table(self, exchange: str | None, change: Callable[[Table], Table]) -> None:
        """Rewrite the exchange's bindings file as ``change(bindings)``, under its lock."""
        table_file = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        try:
            with open(os.open(table_file, os.O_RDWR | os.O_CREAT, 0o644), "r+b", buffering=0) as file:
                filesystem.lock(file, filesystem.LOCK_EX)
                try:
                    table = _bindings(file.read())
                    changed = change(table)
                    if changed != table:
                        file.seek(0)
                        file.write(dumps(changed).encode())
                        file.truncate()
                finally:
                    filesystem.unlock(file)
        except OSError as exc:
            raise ChannelError(f"Cannot open {table_file}") from exc

    def get_table(self, exchange: str) -> Table:
        table_file = self._exchange_file(exchange)
        try:
            with table_file.open("rb") as file:
                filesystem.lock(file, filesystem.LOCK_SH)
                try:
                    content = file.read()
                finally:
                    filesystem.unlock(file)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {table_file}") from exc
        return _bindings(content)


def _bindings(content: bytes) -> Table:
    """An exchange's table as stored; one another process has created and not yet written is
    empty: no bindings yet."""
    return [filesystem.exchange_queue_t(*row) for row in loads(content.decode())] if content else []


class Transport(filesystem.Transport):
    Channel = Channel
