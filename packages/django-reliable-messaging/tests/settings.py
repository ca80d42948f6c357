"""A project with two contexts on the bus: ``notes`` publishes, ``archive`` consumes.

MESSAGING holds the keys the package's README names for a quick start, and one key of context.toml
of the host's own; everything else keeps the bus's defaults, which is what these tests are about.
DATABASE_URL (postgres://... or sqlite:///...) and BROKER_URL (amqp://...) choose the services;
unset, SQLite and the embedded filesystem broker (in the working directory's var/broker, the
default)."""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "tests-only"
DEBUG = True
USE_TZ = True
ROOT_URLCONF = "urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ALLOWED_HOSTS = ["testserver"]


def database(url: str) -> dict:
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path[1:]) or "postgres",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            # Each run its own test database: two runs (a matrix, a developer) never meet.
            "TEST": {"NAME": os.environ.get("BUS_TEST_DATABASE", f"test_reliable_messaging_{os.getpid()}")},
        }
    if parts.scheme == "sqlite":
        # A file, not memory: the relay and consumers the tests start as processes read it too.
        name = unquote(parts.path[1:])
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": name, "TEST": {"NAME": name + ".test"}}
    raise ValueError(f"DATABASE_URL {url!r}: postgres://... or sqlite:///...")


DATABASES = {"default": database(os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'var' / 'bus.sqlite3'}")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "reliable_messaging",
    "notes",
    "archive",
    "errands",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

MESSAGING = {
    "DECLARED_CONTEXTS": ["notes", "archive", "errands"],
    "CONTEXTS_DIR": BASE_DIR,
    "BROKER_URL": os.environ.get("BROKER_URL") or "filesystem://",
    "DECLARATION_KEYS": {"audited": False},
    # notes/context.toml encrypts a note's secret (test_field_encryption*.py): tests-only keys
    "ENCRYPTION_KEYS": {"tests-1": "dGVzdHMtb25seSBrZXksIDMyIGJ5dGVzIGV4YWN0bHk="},
}
