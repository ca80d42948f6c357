import os

from django.core.wsgi import get_wsgi_application

from config.head_requests import WithoutBodyOnHead
from config.request_body import ChunkedBodyReader

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Also what runserver serves (WSGI_APPLICATION), so both read or refuse chunked bodies alike.
application = WithoutBodyOnHead(ChunkedBodyReader(get_wsgi_application()))

# Before the first request opens a connection (and the pool copies its settings): the web
# server's PostgreSQL limits (settings.WEB_DATABASE_TIMEOUTS). runserver serves this module too.
from django.conf import settings  # noqa: E402 - settings are configured by the line above
from reliable_messaging.hosting import apply_session_timeouts  # noqa: E402

apply_session_timeouts(settings.WEB_DATABASE_TIMEOUTS)
