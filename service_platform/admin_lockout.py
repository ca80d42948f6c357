"""The admin's login lockout: django-axes, told who the client is, what to show and what to log.

Axes counts failed logins per account *and* address (``AXES_LOCKOUT_PARAMETERS``) in the
database, so every web worker and process of a deployment sees the same count. Per account
alone, anyone could lock the real operator out; per address alone, one office behind one NAT
would lock itself out. docs/operations.md, "Admin lockout", says how to unlock.
"""

import logging

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.timesince import timeuntil
from django.utils.timezone import now
from rest_framework.throttling import BaseThrottle

from kernel.charts import format_duration

logger = logging.getLogger("service_platform.admin_lockout")


def client_address(request: HttpRequest) -> str:
    """The address the checkout throttle keys on: ``REMOTE_ADDR``, or the hop ``NUM_PROXIES``
    proxies in front saw (``make serve``: nginx's). A client's own ``X-Forwarded-For`` never
    gives it a fresh identity."""
    return BaseThrottle().get_ident(request)


def lockout_message(cool_off) -> str:
    locked = "Too many failed logins for this account from your address: logging in is locked"
    where = "(docs/operations.md, Admin lockout)"
    if not cool_off:
        return f"{locked} until an operator unlocks it {where}."
    moment = now()
    wait = timeuntil(moment + cool_off, moment)
    return f"{locked} for {wait}. An operator can unlock it at once {where}."


def lockout_response(request: HttpRequest, original_response=None, credentials=None) -> HttpResponse:
    """Axes' ``AXES_LOCKOUT_CALLABLE``: the login page, with the message instead of the form."""
    context = {
        **admin.site.each_context(request),
        "title": "Log in",
        "lockout_message": lockout_message(settings.AXES_COOLOFF_TIME),
    }
    return render(request, "admin/locked_out.html", context, status=settings.AXES_HTTP_RESPONSE_CODE)


def log_lockout(sender, request, username, ip_address, **kwargs) -> None:
    """Axes' ``user_locked_out`` signal: sent for the failure that reaches the limit (axes has
    just counted it) and for each attempt refused while locked (not counted)."""
    failures = getattr(request, "axes_failures_since_start", None)
    if failures is None:
        logger.warning(
            "admin login refused while locked out", extra={"username": username, "client_address": ip_address}
        )
        return
    cool_off = settings.AXES_COOLOFF_TIME
    logger.warning(
        "admin login locked out",
        extra={
            "username": username,
            "client_address": ip_address,
            "failures": failures,
            "cool_off": format_duration(cool_off.total_seconds()) if cool_off else "until unlocked",
        },
    )
