"""The admin's query strings, hostile until checked (installed in ``config/settings.py``)."""

from django.core.exceptions import SuspiciousOperation
from django.urls import reverse


class NulInQuery(SuspiciousOperation):
    """A query string holding a NUL character: no PostgreSQL text can be compared with it."""


class AdminQueryMiddleware:
    """Refuses with 400 an admin page's query string holding a NUL, in a name or a value.

    Django's admin checks a filter's value when it builds the query (a bad date or number: a
    redirect with ``?e=1``), but a NUL reaches PostgreSQL, whose refusal (``ValueError``, "cannot
    contain NUL") it does not catch: a 500 on every changelist with a text filter or a search."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        query = "".join(f"{name}{''.join(values)}" for name, values in request.GET.lists())
        if "\x00" in query and request.path_info.startswith(reverse("admin:index")):
            raise NulInQuery("an admin query string holds a NUL character")
        return None
