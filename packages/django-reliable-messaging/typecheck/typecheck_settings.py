"""Settings for the type check only (django-stubs' mypy plugin loads Django with them to read the models).

The bus's own app and the apps its models and admin use; no database is opened."""

SECRET_KEY = "typecheck-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "reliable_messaging",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
