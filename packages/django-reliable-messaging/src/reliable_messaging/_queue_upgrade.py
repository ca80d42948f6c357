"""Upgrading a live broker from classic dead-letter and delay queues to quorum ones.

The releases before the cluster work declared ``C_queue_dlq`` and ``C_queue_retry_<ms>ms`` as
classic queues. RabbitMQ refuses to redeclare a queue with another type (406), so this release
declares quorum queues under new names (``reliable_messaging._broker``) beside them: both releases can run
on one broker during a rolling upgrade. Once no process of the previous release is left,
``upgrade_broker_queues`` moves what the old queues still hold into their successors and
deletes them:

- the old dead-letter queue is first unbound from ``C_queue_dlx`` (from then on, dead letters
  reach the new queue only), then emptied into ``C_queue_dead_letters``;
- each old delay queue is emptied into the delay queue of the ladder's shortest step at least as
  long (the longest, an hour, for a longer one): its wait starts again, so a retry comes late
  rather than early;
- a message is acked in the old queue only after the broker confirmed its copy in the new one:
  a crash in between leaves a copy in both, and the consumers' inbox and the dead-letter table
  (one row per consumer and message id) make the second one harmless. Nothing is lost.

A queue that still has consumers (a process of the previous release) is left alone and
reported: moving messages away from under a consumer that still reads them would race it.
"""

import logging
from dataclasses import dataclass, field
from typing import Any

from amqp.exceptions import NotFound
from kombu import Connection

from reliable_messaging import _broker as broker
from reliable_messaging._conf import setting
from reliable_messaging._topology import consumers

logger = logging.getLogger("reliable_messaging.queue_upgrade")


@dataclass
class UpgradeReport:
    moved: dict[str, int] = field(default_factory=dict)  # old queue -> messages moved
    deleted: list[str] = field(default_factory=list)
    still_consumed: dict[str, int] = field(default_factory=dict)  # old queue -> its consumers

    @property
    def complete(self) -> bool:
        return not self.still_consumed


def legacy_queues() -> list[tuple[str, str]]:
    """(old queue, the queue that replaces it) for every consumer."""
    pairs = []
    for consumer in consumers():
        pairs.append((broker.legacy_dead_letter_queue_name(consumer), broker.dead_letter_queue_name(consumer)))
        for delay in setting("CONSUMER_RETRY_DELAYS"):
            step = min((s for s in broker.DELAY_LADDER if s >= delay), default=broker.DELAY_LADDER[-1])
            pairs.append((broker.legacy_retry_queue_name(consumer, delay), broker.retry_queue_name(consumer, step)))
    return pairs


def upgrade_broker_queues(url: str) -> UpgradeReport:
    """Declare this release's topology, then drain and delete every queue of the previous one."""
    report = UpgradeReport()
    # confirm_publish: every copy waits for its confirm before the original is acked.
    with Connection(url, connect_timeout=10, transport_options={"confirm_publish": True}) as connection:
        connection.connect()
        broker.declare_topology(connection)
        dead_letter_queues = {broker.legacy_dead_letter_queue_name(c): c for c in consumers()}
        for old, new in legacy_queues():
            channel = connection.channel()
            try:
                _, _, readers = channel.queue_declare(old, passive=True)
            except NotFound:
                continue  # never declared, or already upgraded (the failed passive declare closed the channel)
            if readers:
                report.still_consumed[old] = readers
                logger.warning("queue %s still has %d consumer(s): stop the previous release first", old, readers)
                broker.close_quietly(channel)
                continue
            if old in dead_letter_queues:
                channel.queue_unbind(old, broker.dead_letter_exchange(dead_letter_queues[old]).name, routing_key="")
            report.moved[old] = _move(channel, old, new)
            # if_empty: a message that arrived after the last get keeps the queue (and is reported).
            channel.queue_delete(old, if_empty=True)
            report.deleted.append(old)
            logger.info("queue upgraded", extra={"old": old, "new": new, "moved": report.moved[old]})
            broker.close_quietly(channel)
    return report


def _move(channel: Any, source: str, target: str) -> int:  # a py-amqp channel
    """Move every message of ``source`` to ``target`` (confirmed copy first, then the ack)."""
    moved = 0
    while (message := channel.basic_get(source, no_ack=False)) is not None:
        channel.basic_publish(message, exchange="", routing_key=target)  # waits for the confirm
        channel.basic_ack(message.delivery_tag)
        moved += 1
    return moved
