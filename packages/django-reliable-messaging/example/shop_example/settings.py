"""A minimal project on the bus: two contexts, SQLite, the embedded (filesystem) broker."""

from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only"
DEBUG = True
USE_TZ = True
ROOT_URLCONF = "shop_example.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "var" / "example.sqlite3"}}

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "reliable_messaging",
    "greetings",
    "mailroom",
]

# Everything the bus reads (the package's README, "Settings"); the rest keeps its defaults.
MESSAGING = {
    "DECLARED_CONTEXTS": ["greetings", "mailroom"],
    "CONTEXTS_DIR": BASE_DIR,
    "BROKER_URL": "filesystem://",
    "FILESYSTEM_DIR": BASE_DIR / "var" / "broker",
    "EXCHANGE": "example_events",
}
