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

# What the bus must be told (the package's README, "Settings"); everything else keeps its default:
# the embedded filesystem broker in var/broker of the folder the commands run in.
MESSAGING = {
    "DECLARED_CONTEXTS": ["greetings", "mailroom"],
    "CONTEXTS_DIR": BASE_DIR,
}
