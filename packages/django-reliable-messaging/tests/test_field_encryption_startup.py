"""Field-level encryption at start-up: a declaration of encrypted fields needs the ``[crypto]`` extra
and a key; keys that cannot be used, and a declaration or schema that cannot work, are refused
with one line naming the fix."""

from pathlib import Path

import pytest
from reliable_messaging._declarations import DeclarationError, read_declaration

REFUSED = "django.core.exceptions.ImproperlyConfigured: "


def refusal(started) -> str:
    assert started.returncode == 1
    return started.stderr.strip().splitlines()[-1]


def test_a_declaration_of_encrypted_fields_without_a_key_does_not_start(with_settings):
    started = with_settings(ENCRYPTION_KEYS={})("check", ok=False)

    assert refusal(started) == (
        f"{REFUSED}notes/context.toml declares encrypted fields and MESSAGING['ENCRYPTION_KEYS'] is empty: "
        "give key id -> base64 of 32 random bytes (the last listed encrypts)"
    )


@pytest.mark.parametrize("key", ["c2hvcnQ=", "not base64!", 32])
def test_a_key_that_is_not_32_bytes_in_base64_does_not_start(with_settings, key):
    started = with_settings(ENCRYPTION_KEYS={"k9": key})("check", ok=False)

    assert refusal(started) == (
        f"{REFUSED}MESSAGING['ENCRYPTION_KEYS']['k9']: give a non-empty key id and the base64 of 32 random bytes "
        "(python -c 'import os, base64; print(base64.b64encode(os.urandom(32)).decode())')"
    )


def test_without_the_crypto_extra_a_declaration_of_encrypted_fields_does_not_start(workdir):
    from conftest import Manage

    # as if cryptography were not installed: importing it fails
    (workdir / "without_crypto.py").write_text(
        "import sys\nsys.modules['cryptography'] = None\nfrom settings import *  # noqa: F403\n"
    )
    started = Manage(workdir, "without_crypto")("check", ok=False)

    assert refusal(started) == (
        f"{REFUSED}notes/context.toml declares encrypted fields and the cryptography library is missing: "
        "install django-reliable-messaging[crypto]"
    )


def test_a_schema_that_requires_an_encrypted_field_does_not_start(workdir, with_settings):
    # a consumer that may not read the field receives the payload without it
    notes = Path(__file__).parent / "notes"
    copy = workdir / "contexts" / "notes"
    (copy / "schemas").mkdir(parents=True)
    for source in [*notes.glob("*.py"), notes / "context.toml", *(notes / "schemas").glob("*.json")]:
        target = copy / source.relative_to(notes)
        target.write_text(source.read_text())
    schema = copy / "schemas" / "notes.note.written.v1.json"
    schema.write_text(schema.read_text().replace('"required": ["note_id", "text"]', '"required": ["secret"]'))
    for name in ("archive", "errands"):
        (workdir / "contexts" / name).symlink_to(Path(__file__).parent / name)

    started = with_settings(CONTEXTS_DIR=str(workdir / "contexts"))("check", ok=False)

    assert refusal(started) == (
        f"{REFUSED}notes.note.written.v1.json requires 'secret', which its producer encrypts: a consumer that "
        "may not read it receives the payload without it; remove it from the schema's required"
    )


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        (
            '[encrypted."notes.note.priced"]\nsecret = ["archive"]',
            "encrypted 'notes.note.priced': not under publishes",
        ),
        (
            '[encrypted."notes.note.written"]\nsecret = []',
            "encrypted 'notes.note.written': secret = []: a non-empty list of the consumers (context names) "
            "that may read it",
        ),
        (
            '[encrypted."notes.note.written"]\nsecret = "archive"',
            "encrypted 'notes.note.written': secret = 'archive': a non-empty list of the consumers (context names) "
            "that may read it",
        ),
        ('[encrypted]\n"notes.note.written" = 1', "encrypted 'notes.note.written': a table, not 1"),
    ],
)
def test_a_declaration_of_encrypted_fields_is_checked(tmp_path, table, problem):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "context.toml").write_text(
        f'name = "notes"\n[publishes]\n"notes.note.written" = "step"\n{table}\n'
    )

    with pytest.raises(DeclarationError) as refused:
        read_declaration(tmp_path, "notes")

    assert str(refused.value) == f"notes/context.toml: {problem}"
