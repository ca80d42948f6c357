"""The CONTEXTS a deployment hosts, read against the installed ones (hosting.parse_contexts)."""

import pytest
from reliable_messaging.hosting import parse_contexts

INSTALLED = ["notes", "archive", "drafts", "mailroom"]


def test_contexts_come_back_checked_and_in_the_installed_order():
    assert parse_contexts([" mailroom", "notes ", "", "notes"], INSTALLED) == ["notes", "mailroom"]


def test_an_unknown_context_is_named_with_the_choice():
    with pytest.raises(ValueError) as refused:
        parse_contexts(["notes", "billing"], INSTALLED)

    assert str(refused.value) == (
        "CONTEXTS names unknown contexts ['billing']; choose among notes, archive, drafts, mailroom"
    )


def test_no_context_at_all_is_refused():
    with pytest.raises(ValueError, match=r"^CONTEXTS is empty; choose among notes, archive, drafts, mailroom$"):
        parse_contexts([" ", ""], INSTALLED)
