"""The monolith's web server entry (``gunicorn config.wsgi``): its settings, the platform's application."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from service_platform.wsgi import application  # noqa: E402, F401 - needs the settings module named above
