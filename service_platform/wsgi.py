"""The web server's application, for the settings DJANGO_SETTINGS_MODULE names (a service's
``service_settings``; the monolith's entry, ``config/wsgi.py``, names ``config.settings``)."""

from django.core.wsgi import get_wsgi_application

from service_platform.head_requests import WithoutBodyOnHead
from service_platform.request_body import ChunkedBodyReader

# Also what runserver serves (WSGI_APPLICATION), so both read or refuse chunked bodies alike.
application = WithoutBodyOnHead(ChunkedBodyReader(get_wsgi_application()))

# Before the first request opens a connection (and the pool copies its settings): the web
# server's PostgreSQL limits (settings.WEB_DATABASE_TIMEOUTS). runserver serves this module too.
from django.conf import settings  # noqa: E402 - configured by get_wsgi_application
from reliable_messaging.hosting import apply_session_timeouts  # noqa: E402

apply_session_timeouts(settings.WEB_DATABASE_TIMEOUTS)
