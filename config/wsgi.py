import os

from django.core.wsgi import get_wsgi_application

from config.request_body import ChunkedBodyReader

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Also what runserver serves (WSGI_APPLICATION), so both read or refuse chunked bodies alike.
application = ChunkedBodyReader(get_wsgi_application())
