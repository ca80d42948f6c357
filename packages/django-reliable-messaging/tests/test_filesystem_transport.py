"""The embedded broker (reliable_messaging/_filesystem_transport.py): a consumer never takes a message half
written, and processes declaring at once keep every binding. Real files, real processes; no
database, no RabbitMQ."""

import multiprocessing
import os
import time
from pathlib import Path

import pytest
from kombu import Connection, Exchange, Queue
from kombu.transport.virtual import Empty
from reliable_messaging import _filesystem_transport as filesystem_transport

EXCHANGE = Exchange("events", type="topic", durable=True)
FORK = multiprocessing.get_context("fork")


def connect(root: Path) -> Connection:
    return Connection(
        transport=filesystem_transport.Transport,
        hostname="localhost",
        transport_options={
            "data_folder_in": str(root / "data"),
            "data_folder_out": str(root / "data"),
            "control_folder": str(root / "control"),
        },
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "control").mkdir()
    return tmp_path


def test_a_consumer_looking_while_a_message_is_written_sees_nothing_then_the_whole_message(root, monkeypatch):
    with connect(root) as writer, connect(root) as reader:
        seen_during_the_write = []
        replace = os.replace

        def look_then_replace(source, destination):
            # The writer's bytes are on disk, under a name no queue matches, and not yet renamed.
            try:
                seen_during_the_write.append(reader.default_channel._get("archive"))
            except Empty:
                seen_during_the_write.append(None)
            replace(source, destination)

        monkeypatch.setattr(filesystem_transport.os, "replace", look_then_replace)
        writer.default_channel._put("archive", {"body": "x" * 10_000})

        assert seen_during_the_write == [None]
        assert reader.default_channel._get("archive") == {"body": "x" * 10_000}
        with pytest.raises(Empty):
            reader.default_channel._get("archive")
    assert os.listdir(root / "data") == []


def test_a_write_that_fails_leaves_no_partial_file_and_says_so(root, monkeypatch):
    def disk_full(source, destination):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(filesystem_transport.os, "replace", disk_full)
    with connect(root) as writer, pytest.raises(Exception, match="Cannot add file") as raised:
        writer.default_channel._put("archive", {"body": "x"})
    assert type(raised.value).__name__ == "ChannelError"
    assert os.listdir(root / "data") == []


def publish(root: Path, writer: int, count: int) -> None:
    with connect(root) as connection:
        producer = connection.Producer(exchange=EXCHANGE, serializer="json")
        for n in range(count):
            producer.publish({"writer": writer, "n": n}, routing_key="notes.note.written")


def test_two_writers_and_a_reader_in_separate_processes_lose_nothing_and_double_nothing(root):
    per_writer = 300
    with connect(root) as reader:
        queue = Queue("archive", EXCHANGE, routing_key="notes.#")(reader.default_channel)
        queue.declare()
        writers = [FORK.Process(target=publish, args=(root, w, per_writer)) for w in (1, 2)]
        for process in writers:
            process.start()
        received, deadline = [], time.monotonic() + 60
        while len(received) < 2 * per_writer and time.monotonic() < deadline:
            message = queue.get(no_ack=True)
            if message is None:
                time.sleep(0.001)
                continue
            received.append((message.payload["writer"], message.payload["n"]))
        for process in writers:
            process.join(timeout=30)
            assert process.exitcode == 0

    assert len(received) == 2 * per_writer
    assert sorted(received) == [(w, n) for w in (1, 2) for n in range(per_writer)]
    assert os.listdir(root / "data") == []


def bind_at_once(root: Path, name: str, start) -> None:
    with connect(root) as connection:
        start.wait(timeout=30)
        Queue(name, EXCHANGE, routing_key=f"{name}.#")(connection.default_channel).declare()


def test_processes_declaring_at_once_on_a_new_broker_folder_keep_every_binding(tmp_path):
    names = [f"queue{i}" for i in range(6)]
    for round_ in range(8):
        root = tmp_path / f"round{round_}"
        (root / "data").mkdir(parents=True)
        (root / "control").mkdir()
        start = FORK.Barrier(len(names))
        processes = [FORK.Process(target=bind_at_once, args=(root, name, start)) for name in names]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=30)
            assert process.exitcode == 0
        with connect(root) as connection:
            table = connection.default_channel.get_table(EXCHANGE.name)
        assert sorted(row.queue for row in table) == names, f"round {round_}"


def test_an_unbound_key_reaches_the_queue_no_more_in_any_process(root):
    with connect(root) as first:
        for key in ("a.b.c", "a.b.d"):
            Queue("archive", EXCHANGE, routing_key=key)(first.default_channel).declare()
        first.default_channel.queue_unbind("archive", exchange="events", routing_key="a.b.c")
    with connect(root) as second:  # another process: it reads the bindings from the files
        producer = second.Producer()
        for key in ("a.b.c", "a.b.d"):
            producer.publish({"key": key}, exchange=EXCHANGE, routing_key=key)
        got = Queue("archive", EXCHANGE, routing_key="a.b.d")(second.default_channel).get(no_ack=True)
        assert got.payload == {"key": "a.b.d"}
        assert Queue("archive", EXCHANGE, routing_key="a.b.d")(second.default_channel).get(no_ack=True) is None
