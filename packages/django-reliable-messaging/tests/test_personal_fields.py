"""Erasure by crypto-shredding: a note's author is its data subject (notes/context.toml,
``[personal]``), sealed under the author's own key, readable by the archive alone. Once
``erase_subject`` deletes that key, no copy can be read and every consumer refuses such a
message with the reason ``subject_erased``; another author's notes are untouched."""

import base64
import json
import threading
import uuid

import pytest
from archive.models import Filed
from django.db import connection, transaction
from notes.services import write_note
from reliable_messaging._dead_letters import dead_letter_display_body, dead_letter_record
from reliable_messaging._decisions import Outcome
from reliable_messaging._declarations import DeclarationError, read_declaration
from reliable_messaging._dispatch import Delivery, decide_batch
from reliable_messaging.api import erase_subject
from reliable_messaging.models import OutboxMessage, SubjectKey
from reliable_messaging.testing import deliver
from retrying.bus import bus  # noqa: F401 - the fixture

EVENT = "notes.note.written"
NEW_KEY = base64.b64encode(b"rotated key, also 32 bytes long!").decode()


def written(author: str) -> dict:
    """The payload of a new note by ``author``, as its outbox row holds it."""
    note = write_note("fine", author=author)
    return OutboxMessage.objects.get(aggregate_id=str(note.id)).payload


def tables_holding(text: str) -> list[str]:
    with connection.cursor() as cursor:
        holding = []
        for table in sorted(connection.introspection.table_names(cursor)):
            cursor.execute(
                f"SELECT count(*) FROM {connection.ops.quote_name(table)} AS t WHERE t::text LIKE %s", [f"%{text}%"]
            )
            if cursor.fetchone()[0]:
                holding.append(table)
    return holding


def test_the_author_is_sealed_under_a_key_of_their_own(db):
    ada, again, bob = written("ada-lovelace"), written("ada-lovelace"), written("bob-babbage")

    sealed = [payload["author"]["$encrypted"] for payload in (ada, again, bob)]
    assert [sorted(s) for s in sealed] == [["ct", "for", "sub"]] * 3
    assert [s["for"] for s in sealed] == [["archive"]] * 3
    assert sealed[0]["sub"] == sealed[1]["sub"] != sealed[2]["sub"]
    assert sealed[0]["ct"] != sealed[1]["ct"]  # a fresh nonce each time
    assert SubjectKey.objects.count() == 2
    if connection.vendor == "postgresql":  # no table holds an author in clear, the keys' neither
        assert (tables_holding("ada-lovelace"), tables_holding("bob-babbage")) == ([], [])


def test_the_archive_reads_the_author_and_another_consumer_receives_the_note_without_it(seen):
    payload = written("ada-lovelace")

    for consumer in ("archive", "retrying"):
        assert deliver(consumer, EVENT, payload).outcome == Outcome.HANDLED

    assert [(who, sorted(got), got.get("author")) for who, got in seen] == [
        ("archive", ["author", "note_id", "text"], "ada-lovelace"),
        ("retrying", ["note_id", "text"], None),
    ]


def test_an_erased_author_s_note_is_refused_by_every_consumer_and_another_s_is_handled(seen):
    ada, bob = written("ada-lovelace"), written("bob-babbage")
    key_id = ada["author"]["$encrypted"]["sub"]

    assert erase_subject("ada-lovelace") == 1
    assert erase_subject("ada-lovelace") == 0  # nothing left to erase

    for consumer in ("archive", "retrying"):
        refused = deliver(consumer, EVENT, ada)  # a redelivery, or a replay
        assert (refused.outcome, refused.reason) == (Outcome.DEAD_LETTER, "subject_erased")
        assert refused.error.startswith(f"field 'author': subject erased (its key {key_id} was deleted on ")
        assert refused.error.endswith(" UTC): this message can never be handled; purge it")
    assert seen == []
    assert deliver("archive", EVENT, bob).outcome == Outcome.HANDLED
    assert [(who, got["author"]) for who, got in seen] == [("archive", "bob-babbage")]
    assert Filed.objects.count() == 1
    erased = SubjectKey.objects.get(key_id=key_id)
    assert (erased.subject_digest, erased.wrapped, erased.wrap_kid, erased.erased_at is not None) == (
        None,
        "",
        "",
        True,
    )


def to_archive(payload: dict) -> Delivery:
    """``payload`` as the relay carries it to the archive."""
    return Delivery(
        consumer="archive",
        body=json.dumps(payload).encode(),
        properties={"message_id": str(uuid.uuid4()), "correlation_id": payload["note_id"]},
        headers={"event_type": EVENT, "schema_version": 1},
        routing_key=EVENT,
    )


HANDLED, ERASED = (Outcome.HANDLED, ""), (Outcome.DEAD_LETTER, "subject_erased")


@pytest.mark.parametrize(
    ("authors", "decided"),
    [
        (["ada-lovelace"], [HANDLED]),
        (["ada-lovelace", "carl-gauss", "bob-babbage", "ada-lovelace"], [HANDLED, ERASED, HANDLED, HANDLED]),
    ],
    ids=["alone", "batch"],
)
def test_a_batch_reads_its_subject_keys_with_one_query_in_its_transaction(seen, authors, decided):
    notes = [written(author) for author in authors]
    erase_subject("carl-gauss")
    reads = []  # whether each query of the subject keys ran in a transaction

    def recording(execute, sql, params, many, context):
        if SubjectKey._meta.db_table in sql:
            reads.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(recording):
        decisions = decide_batch([to_archive(note) for note in notes])

    assert reads == [True]
    assert [(d.outcome, d.reason) for d in decisions] == decided
    assert sorted(got["author"] for _, got in seen) == sorted(a for a in authors if a != "carl-gauss")


def test_a_dead_letter_shows_the_author_encrypted_then_erased(db):
    payload = written("ada-lovelace")
    key_id = payload["author"]["$encrypted"]["sub"]
    letter = dead_letter_record(
        consumer="archive",
        body=json.dumps(payload).encode(),
        properties={"message_id": "m-1"},
        headers={"event_type": EVENT, "schema_version": 1},
        routing_key=EVENT,
        reason="handler_error",
        error="RuntimeError: the shelf fell",
    )
    assert json.loads(dead_letter_display_body(letter))["author"] == f"encrypted for archive (subject key {key_id})"

    erase_subject("ada-lovelace")

    assert json.loads(dead_letter_display_body(letter))["author"] == f"erased (subject key {key_id})"


def test_a_subject_keeps_its_key_across_a_rotation_of_the_configured_keys(seen, settings):
    before = written("ada-lovelace")
    keys = settings.MESSAGING["ENCRYPTION_KEYS"]
    settings.MESSAGING = {**settings.MESSAGING, "ENCRYPTION_KEYS": {**keys, "tests-2": NEW_KEY}}
    after, bob = written("ada-lovelace"), written("bob-babbage")

    assert before["author"]["$encrypted"]["sub"] == after["author"]["$encrypted"]["sub"]
    assert sorted(SubjectKey.objects.values_list("wrap_kid", flat=True)) == ["tests-1", "tests-2"]
    for payload in (before, after, bob):
        assert deliver("archive", EVENT, payload).outcome == Outcome.HANDLED
    assert [got["author"] for _, got in seen] == ["ada-lovelace", "ada-lovelace", "bob-babbage"]
    assert erase_subject("ada-lovelace") == 1


def flip_last_byte(text: str) -> str:
    raw = base64.b64decode(text)
    return base64.b64encode(raw[:-1] + bytes([raw[-1] ^ 1])).decode()


def test_a_tampered_author_is_a_dead_letter_with_its_reason(db):
    payload = written("ada-lovelace")
    sealed = payload["author"]["$encrypted"]
    payload["author"] = {"$encrypted": {**sealed, "ct": flip_last_byte(sealed["ct"])}}

    delivered = deliver("archive", EVENT, payload)

    assert (delivered.outcome, delivered.reason, delivered.error) == (
        Outcome.DEAD_LETTER,
        "undecryptable",
        f"field 'author': the ciphertext fails authentication under subject key {sealed['sub']!r}",
    )
    assert Filed.objects.count() == 0


def test_a_reader_deployed_apart_from_the_key_is_a_dead_letter_naming_why(db):
    payload = written("ada-lovelace")
    key_id = payload["author"]["$encrypted"]["sub"]
    SubjectKey.objects.all().delete()  # as in another deployment's database

    delivered = deliver("archive", EVENT, payload)

    assert (delivered.outcome, delivered.reason, delivered.error) == (
        Outcome.DEAD_LETTER,
        "undecryptable",
        f"field 'author': subject key {key_id!r} is not in this database: the reader must share it",
    )


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        (
            '[personal."notes.note.priced"]\nsubject = "author"\nfields = ["author"]',
            "personal 'notes.note.priced': not under publishes",
        ),
        (
            '[personal."notes.note.written"]\nfields = ["author"]',
            "personal 'notes.note.written': subject = None: the name of the field naming whose data it is",
        ),
        (
            '[personal."notes.note.written"]\nsubject = "author"\nfields = []',
            "personal 'notes.note.written': fields = []: a non-empty list of the fields to encrypt",
        ),
        (
            '[personal."notes.note.written"]\nsubject = "author"\nfields = ["author"]\nreaders = "archive"',
            "personal 'notes.note.written': readers = 'archive': a list of the consumers (context names) "
            "that may read them",
        ),
        (
            '[personal."notes.note.written"]\nsubject = "author"\nfields = ["author"]\nreader = ["archive"]',
            "personal 'notes.note.written': 'reader' is not a key: give subject, fields and readers",
        ),
        (
            '[encrypted."notes.note.written"]\nauthor = ["archive"]\n'
            '[personal."notes.note.written"]\nsubject = "author"\nfields = ["author"]',
            "personal 'notes.note.written': 'author' is under encrypted too: a field has one key",
        ),
    ],
)
def test_a_declaration_of_personal_fields_is_checked(tmp_path, table, problem):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "context.toml").write_text(
        f'name = "notes"\n[publishes]\n"notes.note.written" = "step"\n{table}\n'
    )

    with pytest.raises(DeclarationError) as refused:
        read_declaration(tmp_path, "notes")

    assert str(refused.value) == f"notes/context.toml: {problem}"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent transactions need PostgreSQL")
def test_two_first_notes_about_one_author_at_once_share_one_key(transactional_db):
    # The first inserts the author's key and holds its transaction open; the second's insert of the
    # same digest waits for it, then reads and uses that key instead of its own.
    first_in, second_done = threading.Event(), threading.Event()
    payloads: dict[str, dict] = {}

    def note(name: str, hold: bool) -> None:
        try:
            with transaction.atomic():
                payloads[name] = written("ada-lovelace")
                if hold:
                    first_in.set()
                    assert not second_done.wait(1.0)  # the second waits on this transaction
        finally:
            first_in.set()
            connection.close()

    def second() -> None:
        assert first_in.wait(10)
        note("second", hold=False)
        second_done.set()

    threads = [threading.Thread(target=note, args=("first", True)), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(payloads) == ["first", "second"]
    keys = {name: payload["author"]["$encrypted"]["sub"] for name, payload in payloads.items()}
    assert keys["first"] == keys["second"]
    assert list(SubjectKey.objects.values_list("key_id", flat=True)) == [keys["first"]]
