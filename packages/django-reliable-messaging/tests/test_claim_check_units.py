"""The claim check's parts without processes: its settings, the references a consumer refuses
before reading anything, a storage named in STORAGES (not the filesystem), and a relay whose
storage fails."""

import hashlib
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import Storage, storages
from django.test import override_settings
from django.utils import timezone
from reliable_messaging import _claim_check as claim_check
from reliable_messaging._conf import check_settings
from reliable_messaging._decisions import Outcome
from reliable_messaging._delivery_checks import Refused, prepare
from reliable_messaging._envelope import InvalidMessage, encode_body, parse_incoming
from reliable_messaging._housekeeping import messages_purge
from reliable_messaging._relay import OutboxRelay
from reliable_messaging.models import OutboxMessage
from test_claim_check import PRICED, priced

IN_MEMORY = {
    **settings.STORAGES,
    "payloads": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    "broken": {"BACKEND": "test_claim_check_units.BrokenStorage"},
}


class BrokenStorage(Storage):
    """A storage that does not answer (an object store down)."""

    def exists(self, name: str) -> bool:
        raise OSError("the object store does not answer")

    def _open(self, name: str, mode: str = "rb") -> Any:
        raise OSError("the object store does not answer")


def messaging(**changed: Any) -> Any:
    return override_settings(MESSAGING={**settings.MESSAGING, **changed}, STORAGES=IN_MEMORY)


def parsed(message_id: str, reference: object, **headers: Any) -> Any:
    headers = {"event_type": PRICED, "schema_version": 2, claim_check.HEADER: reference, **headers}
    return parse_incoming(claim_check.BODY, {"message_id": message_id}, headers, PRICED)


@pytest.mark.parametrize(
    ("changed", "refusal"),
    [
        (
            {"CLAIM_CHECK_BYTES": 2 * 1024 * 1024},
            "MESSAGING['CLAIM_CHECK_BYTES'] is 2097152: give None (off) or a number of bytes up to "
            "MAX_MESSAGE_BYTES (1048576): a payload not stored apart travels inline",
        ),
        (
            {"CLAIM_CHECK_BYTES": 1024, "CLAIM_CHECK_MAX_BYTES": 512},
            "MESSAGING['CLAIM_CHECK_MAX_BYTES'] is 512: give a number of bytes, at least CLAIM_CHECK_BYTES",
        ),
        (
            {"CLAIM_CHECK_STORAGE": "s3"},
            "MESSAGING['CLAIM_CHECK_STORAGE'] is 's3', which STORAGES does not name: give one of its aliases, "
            "or None for a filesystem storage in var/claim-check",
        ),
    ],
)
def test_settings_it_cannot_use_stop_the_start(changed, refusal):
    with messaging(**changed), pytest.raises(ImproperlyConfigured) as refused:
        check_settings()
    assert str(refused.value) == refusal


def test_a_reference_that_is_not_its_messages_own_is_refused_before_anything_is_read():
    message_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    own = f"{PRICED}/{message_id}.{'0' * 32}.json"
    reference = {"key": own, "size": 10, "sha256": "0" * 64}
    not_its_own = (
        f"the key '{own}' is not where the relay stores this message's payload ({PRICED}/{other}.<random>.json)"
    )
    not_where = "is not where the relay stores this message's payload"
    escaping = f"the key '{PRICED}/../x.json' {not_where} ({PRICED}/../x.<random>.json)"
    too_large = "is not a number of bytes up to CLAIM_CHECK_MAX_BYTES (16777216)"
    cases = [
        (other, reference, not_its_own),
        ("../x", {**reference, "key": f"{PRICED}/../x.json"}, escaping),
        (message_id, {**reference, "size": 16 * 1024 * 1024 + 1}, f"its size 16777217 {too_large}"),
        (message_id, {**reference, "size": True}, f"its size True {too_large}"),
        (message_id, {"key": own}, f"x-claim-check is not {{key, size, sha256}}: {{'key': '{own}'}}"),
    ]
    with messaging(CLAIM_CHECK_STORAGE="broken"):  # never asked: each is refused first
        for mid, forged, detail in cases:
            with pytest.raises(InvalidMessage) as refused:
                parsed(mid, forged)
            assert (refused.value.reason, refused.value.detail) == ("invalid_claim_check", detail)


@pytest.mark.django_db
def test_a_storage_named_in_storages_keeps_the_payload_until_its_row_goes():
    message_id = priced()
    body = encode_body(OutboxMessage.objects.get().payload)
    with messaging(CLAIM_CHECK_BYTES=1024, CLAIM_CHECK_STORAGE="payloads"):
        reference = claim_check.store(PRICED, message_id, body)
        again = claim_check.store(PRICED, message_id, body)  # two relays: two copies, each whole
        assert reference == {"key": reference["key"], "size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        assert again == {**reference, "key": again["key"]}
        assert sorted(storages["payloads"].listdir(PRICED)[1]) == sorted(
            key.split("/", 1)[1] for key in (reference["key"], again["key"])
        )
        assert parsed(message_id, reference).payload == OutboxMessage.objects.get().payload
        with pytest.raises(InvalidMessage) as unavailable:
            with override_settings(MESSAGING={**settings.MESSAGING, "CLAIM_CHECK_STORAGE": "broken"}):
                parsed(message_id, reference)
        assert (unavailable.value.reason, unavailable.value.detail) == (
            "claim_check_unavailable",
            f"the storage did not give {reference['key']}: OSError: the object store does not answer",
        )
        # No fault of the message: a consumer may retry it (the message, its payload not fetched).
        assert isinstance(unavailable.value, claim_check.StorageUnavailable)
        assert unavailable.value.event is not None
        assert (unavailable.value.event.message_id, unavailable.value.event.attempt) == (message_id, 1)

        OutboxMessage.objects.update(published_at=timezone.now() - timedelta(days=6))
        assert messages_purge().stored_payloads == 0
        OutboxMessage.objects.update(published_at=timezone.now() - timedelta(days=8))
        assert str(messages_purge()) == "outbox 1, inbox 0, event log 0, dead letters 0, stored payloads 2"
        assert storages["payloads"].listdir(PRICED) == ([], [])


@pytest.mark.django_db(transaction=True)
def test_a_row_whose_payload_cannot_be_stored_is_retried_then_parked():
    priced()
    with messaging(CLAIM_CHECK_BYTES=1024, CLAIM_CHECK_STORAGE="broken", RELAY_MAX_ATTEMPTS=2):
        relay = OutboxRelay(housekeeping=False)
        assert relay.relay_batch() == 1  # claimed, left for its payload to be stored: no broker needed
        row = OutboxMessage.objects.get()
        assert (row.attempts, row.published_at, row.parked_at) == (1, None, None)
        assert row.last_error == "its payload could not be stored apart: OSError: the object store does not answer"
        OutboxMessage.objects.update(next_attempt_at=None)
        assert relay.relay_batch() == 1
        row = OutboxMessage.objects.get()
        assert (row.attempts, row.published_at, row.parked_at is not None) == (2, None, True)
        assert relay.relay_batch() == 0


@pytest.mark.django_db
def test_a_storage_that_does_not_answer_is_a_retry_not_a_dead_letter():
    # The consumer's checks before its transaction: no fault of the message, so its handler's policy
    # retries it (and its breaker counts it) instead of a dead letter at once.
    message_id = priced()
    body = encode_body(OutboxMessage.objects.get().payload)
    with messaging(CLAIM_CHECK_BYTES=1024, CLAIM_CHECK_STORAGE="payloads"):
        reference = claim_check.store(PRICED, message_id, body)
    headers = {"event_type": PRICED, "schema_version": 2, claim_check.HEADER: reference}
    with messaging(CLAIM_CHECK_BYTES=1024, CLAIM_CHECK_STORAGE="broken"), pytest.raises(Refused) as refused:
        prepare("archive", claim_check.BODY, {"message_id": message_id}, headers, PRICED)

    decision = refused.value.decision
    assert (decision.outcome, decision.reason, decision.transient) == (Outcome.RETRY, "claim_check_unavailable", True)
    assert (decision.event.message_id, decision.event.attempt) == (message_id, 1)
