"""The admin's login lockout (django-axes, service_platform/admin_lockout.py) through Django's test client
on PostgreSQL: five wrong passwords lock that account at that address, the right one included,
with a page that says so, a log line, and an unlock by management command (issue 26, row 10).
Through real servers, DEBUG on and off and behind nginx: service_platform/tests/e2e/test_admin_lockout.py."""

import logging

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
ADDRESS = "198.51.100.7"
LOCKED = (
    "Too many failed logins for this account from your address: logging in is locked for 15\xa0minutes. "
    "An operator can unlock it at once (docs/operations.md, Admin lockout)."
)
WRONG = "Please enter the correct username and password for a staff account."


@pytest.fixture
def operator(db) -> User:
    return User.objects.create_superuser("ops", "ops@example.com", PASSWORD)


def log_in(password: str, username: str = "ops", address: str = ADDRESS, agent: str = "browser"):
    client = Client(REMOTE_ADDR=address, HTTP_USER_AGENT=agent)
    return client.post("/admin/login/?next=/admin/", {"username": username, "password": password, "next": "/admin/"})


def outcome(response) -> str:
    if response.status_code == 302 and response["Location"] == "/admin/":
        return "in"
    page = response.content.decode()
    if response.status_code == 429 and f'<p class="errornote" id="login-locked-out">{LOCKED}</p>' in page:
        return "locked"
    assert (response.status_code, WRONG in page) == (200, True), page
    return "wrong"


def lockout_lines(caplog) -> list[tuple]:
    return [
        (r.levelname, r.getMessage(), r.username, r.client_address, getattr(r, "failures", None))
        for r in caplog.records
        if r.name == "service_platform.admin_lockout"
    ]


def test_five_wrong_passwords_lock_the_account_at_that_address_the_right_one_included(operator, caplog):
    caplog.set_level(logging.WARNING, logger="service_platform.admin_lockout")

    tries = [outcome(log_in("wrong")) for _ in range(5)]
    right = log_in(PASSWORD)

    assert tries == ["wrong"] * 4 + ["locked"]
    assert outcome(right) == "locked"
    assert "_auth_user_id" not in right.wsgi_request.session
    assert lockout_lines(caplog) == [
        ("WARNING", "admin login locked out", "ops", ADDRESS, 5),
        ("WARNING", "admin login refused while locked out", "ops", ADDRESS, None),
    ]
    assert [r.cool_off for r in caplog.records if r.getMessage() == "admin login locked out"] == ["15m 00s"]
    # Refused without a write: the count stays where it locked.
    assert AccessAttempt.objects.get().failures_since_start == 5
    # Per account and address: the same account elsewhere, another account here, are not locked.
    assert outcome(log_in(PASSWORD, address="198.51.100.8")) == "in"
    User.objects.create_superuser("ops2", "ops2@example.com", PASSWORD)
    assert outcome(log_in(PASSWORD, username="ops2")) == "in"


def test_an_operator_unlocks_an_account_with_axes_reset_username(operator, capsys):
    for _ in range(5):
        log_in("wrong")
    assert outcome(log_in(PASSWORD)) == "locked"

    call_command("axes_reset_username", "ops")

    assert capsys.readouterr().out == "1 attempts removed.\n"
    assert AccessAttempt.objects.count() == 0
    assert outcome(log_in(PASSWORD)) == "in"


def test_a_successful_login_starts_the_count_again(operator):
    first = [outcome(log_in("wrong")) for _ in range(4)]
    success = outcome(log_in(PASSWORD))
    again = [outcome(log_in("wrong")) for _ in range(4)]

    assert (first, success, again) == (["wrong"] * 4, "in", ["wrong"] * 4)
    assert outcome(log_in(PASSWORD)) == "in"


def test_the_locked_page_shows_no_form_and_keeps_the_admins_headers(operator):
    for _ in range(5):
        locked = log_in("wrong")

    page = locked.content.decode()
    assert 'id="login-form"' not in page and "Saga shop operations" in page
    assert locked["X-Frame-Options"] == "DENY" and "Content-Security-Policy" in locked


def test_with_no_cool_off_the_lock_holds_until_an_operator_unlocks_it(operator, settings):
    settings.AXES_COOLOFF_TIME = None  # AXES_COOLOFF_TIME=0

    for _ in range(5):
        locked = log_in("wrong")

    assert locked.status_code == 429
    assert (
        '<p class="errornote" id="login-locked-out">Too many failed logins for this account from your address: '
        "logging in is locked until an operator unlocks it (docs/operations.md, Admin lockout).</p>"
    ) in locked.content.decode()


def test_another_user_agent_or_spelling_of_the_name_is_the_same_account_and_address(operator):
    tries = [outcome(log_in("wrong", agent=f"agent {n}")) for n in range(4)]
    tries.append(outcome(log_in("wrong", username=" ops ")))  # the form strips it, as for the login itself

    assert tries == ["wrong"] * 4 + ["locked"]
    assert outcome(log_in(PASSWORD, agent="yet another")) == "locked"
