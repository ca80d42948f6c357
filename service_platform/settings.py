"""The settings every service shares, read from the environment (or a ``.env`` file) with django-environ.

A service's settings module (the monolith's ``config/settings.py``, a built service's ``service_settings.py``)
imports them all, names the contexts it installs and adds what follows from them (``hosting``)::

    from service_platform.settings import *
    from service_platform.settings import hosting

    INSTALLED_CONTEXTS = ["orders", "payments", "inventory", "shipping"]
    globals().update(hosting(INSTALLED_CONTEXTS))

No environment at all gives the embedded default: SQLite and kombu's filesystem
broker under ``var/``. ``.env.example`` lists every variable.
"""

import base64
import hashlib
import hmac
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote, urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured
from reliable_messaging.hosting import context_of, known_packages, names, parse_contexts, read_declarations

from kernel.durations import parse_duration

# The tree the platform sits in (the repository, or a service's tree): the contexts' folders, .env, var/.
BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

VAR_DIR = Path(env.str("VAR_DIR", default=str(BASE_DIR / "var"))).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

# --- Security -----------------------------------------------------------------------------
DEBUG = env.bool("DEBUG", default=False)
if DEBUG:
    SECRET_KEY = env.str("SECRET_KEY", default="django-insecure-development-only")
    ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
else:
    # No silent fallback in production: a missing value stops the process here, in one line
    # (manage.py prints an ImproperlyConfigured without its traceback).
    _missing = [name for name in ("SECRET_KEY", "ALLOWED_HOSTS") if not env.str(name, default="")]
    if _missing:
        raise ImproperlyConfigured(
            f"{' and '.join(_missing)} not set: with DEBUG off set SECRET_KEY and ALLOWED_HOSTS "
            "(or DEBUG=1 on a development machine)"
        )
    SECRET_KEY = env.str("SECRET_KEY")
    ALLOWED_HOSTS = env.list("ALLOWED_HOSTS")

HTTPS = env.bool("HTTPS", default=False)
if HTTPS:
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = 31536000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

# --- The saga's style ------------------------------------------------------------------------
# How orders placed from now on run their saga (docs/sagas.md): "choreography" (each context
# reacts to the others' events) or "orchestration" (the orchestrator context sends commands). An
# order keeps the style it began in. The orchestrator is installed where ORCHESTRATOR is on
# (default: when SAGA_STYLE is orchestration; hosting()); keep it on in every deployment while orchestrated
# orders are in flight. Off, nothing is bound to its queue: choreography pays nothing for it.
SAGA_STYLE = env.str("SAGA_STYLE", default="choreography")
if SAGA_STYLE not in ("choreography", "orchestration"):
    raise ImproperlyConfigured(f"SAGA_STYLE must be choreography or orchestration, not {SAGA_STYLE!r}")
ORCHESTRATOR = env.bool("ORCHESTRATOR", default=SAGA_STYLE == "orchestration")
if SAGA_STYLE == "orchestration" and not ORCHESTRATOR:
    raise ImproperlyConfigured("SAGA_STYLE=orchestration needs the orchestrator: unset ORCHESTRATOR or set it to 1")

# --- Applications -------------------------------------------------------------------------
# Every service's: INSTALLED_APPS is these, the hosted contexts' packages, then the platform's own (hosting()).
PLATFORM_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",  # the admin's login lockout (service_platform/admin_lockout.py)
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served from our own static files, no CDN
    "csp",
    "reliable_messaging",
    "kernel",  # an app for its static files: the saga admin's Mermaid (kernel/static/kernel/mermaid/)
    "operations",  # the operator's views of the saga, read through the bus (operations/apps.py)
]

MIDDLEWARE = [
    # The first three only add headers on the way out, so every response gets them: the
    # refusals below and errors Django raised before a view included.
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "service_platform.middleware.RequestShapeMiddleware",  # a disallowed Host, an unreadable chunked body: JSON
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files (admin, API docs) under gunicorn
    "service_platform.middleware.TraceparentMiddleware",
    "service_platform.middleware.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "service_platform.middleware.ApiPathMiddleware",  # before CommonMiddleware's APPEND_SLASH
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "kernel.middleware.AdminQueryMiddleware",  # a NUL in an admin query string: 400, not a 500
    # Last, as django-axes asks: turns a login refused for a lockout into its page (429).
    "axes.middleware.AxesMiddleware",
]

# Content-Security-Policy (django-csp) on every response. Scripts, styles, images and fonts
# come from this origin only: the admin's, the swimlane's and the overview's SVG are inline
# markup (no script), Swagger UI's bundle and its init script are our own static files
# (drf-spectacular-sidecar, SpectacularSwaggerSplitView). Inline styles stay allowed: the admin
# and Swagger UI set style attributes, and a style cannot run code.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

ROOT_URLCONF = "service_platform.urls"
WSGI_APPLICATION = "service_platform.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).resolve().parent / "templates"],  # before the admin's own
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            "libraries": {"ops": "kernel.templatetags.ops"},
        },
    },
]

# --- Databases ----------------------------------------------------------------------------
_SQLITE_OPTIONS = {
    # Several processes write (web, relay, consumers): IMMEDIATE avoids "database is locked"
    # on read-then-write transactions, WAL lets readers run beside the writer.
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}


# Django's own connection pool (psycopg_pool) in every process that serves requests: a fixed
# number of connections per process, however many threads the server makes (runserver makes
# one per request). The pool needs CONN_MAX_AGE=0. The relay, the consumers and the deadline
# loop keep one dedicated connection instead (reliable_messaging._lifecycle.use_dedicated_connections):
# they hold LISTEN and application_name, session state a pool would hand to its next user.
DATABASE_POOL = {
    "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=1),
    "max_size": env.int("DATABASE_POOL_MAX_SIZE", default=4),
    # A request waits this long for a connection, then gets 503: well inside a client's patience
    # while the database refuses or does not answer.
    "timeout": parse_duration(env.str("DATABASE_POOL_TIMEOUT", default="3")),
    # A failed connection attempt is retried with backoff for this long, then given up, so the
    # next request tries afresh: requests succeed again within seconds of the database's return.
    "reconnect_timeout": 5.0,
    "max_idle": 60.0,
}


def database(url: str, *, pool: bool = True) -> dict:
    config = env.db_url_config(url)
    config["CONN_MAX_AGE"] = 0
    config["CONN_HEALTH_CHECKS"] = True
    if config["ENGINE"] == "django.db.backends.postgresql":
        # Django's backend, with a pool health check that cannot hang (service_platform/postgresql/base.py).
        config["ENGINE"] = "service_platform.postgresql"
        # A database that does not answer fails fast: a connection attempt after 3 s, and an open
        # connection whose packets go unacknowledged (a partition) after 3 s (tcp_user_timeout),
        # instead of the minutes of TCP retransmissions. Keepalives find dead idle connections.
        config["OPTIONS"] = {
            "connect_timeout": 3,
            "tcp_user_timeout": 3000,
            "keepalives_idle": 30,
            "keepalives_interval": 5,
            "keepalives_count": 3,
            **config.get("OPTIONS", {}),
        }
        if pool and DATABASE_POOL["max_size"] > 0:
            config["OPTIONS"]["pool"] = dict(DATABASE_POOL)
    if config["ENGINE"] == "django.db.backends.sqlite3":
        config["OPTIONS"] = {**_SQLITE_OPTIONS, **config.get("OPTIONS", {})}
    return config


DATABASE_URL = env.str("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}")
DATABASES = {"default": database(DATABASE_URL)}
if env.str("TEST_DATABASE_NAME", default=""):
    DATABASES["default"]["TEST"] = {"NAME": env.str("TEST_DATABASE_NAME")}

# An SQLite database's folder holds what belongs with it: the filesystem broker (and the monolith's
# fake gateway's ledger). So a command run by hand needs only the DATABASE_URL it is told, never
# the VAR_DIR its deployment was started with.
_sqlite_name = str(DATABASES["default"]["NAME"]) if DATABASE_URL.startswith("sqlite") else ""
sqlite_folder = Path(_sqlite_name).resolve().parent if _sqlite_name not in ("", ":memory:") else None

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Messaging ----------------------------------------------------------------------------
BROKER_URL = env.str("BROKER_URL", default="filesystem://")
_EMBEDDED_BROKER = BROKER_URL.startswith("filesystem")
# The filesystem broker's folder: the URL's path (filesystem:///srv/shop/broker), else broker/
# beside the SQLite database, else under VAR_DIR. Every process of a shop must find the same one.
_broker_path = BROKER_URL.partition("://")[2] if _EMBEDDED_BROKER else ""
FILESYSTEM_BROKER_DIR = (
    Path(_broker_path)
    if _broker_path.startswith("/") and _broker_path.strip("/")
    else (sqlite_folder or VAR_DIR) / "broker"
)
BROKER_HEARTBEAT = env.int("BROKER_HEARTBEAT", default=30)
# Which broker user publishes each context's events: "orders=shop_orders,payments=shop_payments,..."
# (unset: one shared user, nothing checked). A consumer refuses a message whose AMQP user_id does
# not own its routing key (docs/operations.md, "Broker users and permissions").
BROKER_PRODUCERS = dict(pair.partition("=")[::2] for pair in env.list("BROKER_PRODUCERS", default=[]))
if not all(context and user for context, user in BROKER_PRODUCERS.items()):
    raise ImproperlyConfigured("BROKER_PRODUCERS: write <context>=<broker user>,... (e.g. orders=shop_orders)")
# Development only (DEBUG): a key known to everyone, so no secret; tests give it to processes they
# start with DEBUG off, which then read what the test's own process writes.
DEVELOPMENT_ENCRYPTION_KEYS = "development=ZGV2ZWxvcG1lbnQgb25seSwgbm90IGEgc2VjcmV0ISE="


def _key_of_secret(secret: str) -> str:
    """A field key derived from SECRET_KEY where no MESSAGING_ENCRYPTION_KEYS is given: the deployments
    of one shop that share SECRET_KEY share it. Its id names the secret's digest, so a message
    written under another SECRET_KEY is refused as under an unknown key, not misread."""
    key = hmac.new(secret.encode(), b"reliable_messaging field encryption", hashlib.sha256).digest()
    return f"secret-{hashlib.sha256(key).hexdigest()[:12]}={base64.b64encode(key).decode()}"


_ENCRYPTION_KEYS = dict(
    pair.partition("=")[::2]
    for pair in env.list("MESSAGING_ENCRYPTION_KEYS", default=[])
    or [DEVELOPMENT_ENCRYPTION_KEYS if DEBUG else _key_of_secret(SECRET_KEY)]
)
MESSAGING = {
    "EXCHANGE": env.str("MESSAGING_EXCHANGE", default="ecommerce_events"),
    "ASYNCAPI_TITLE": "Saga shop events",
    # How the swimlane colours each event (publishes in context.toml), and the saga's own key: a
    # context that follows the saga hears its events and never answers (shipping, startcontext's).
    "EVENT_KINDS": ("step", "outcome", "failure", "compensation"),
    "DECLARATION_KEYS": {"follows": False},
    # What a worker on a database missing its migrations tells the operator to run.
    "SETUP_COMMAND": "prepare_deployment",
    "PRODUCERS": BROKER_PRODUCERS,
    # This deployment's own broker user: its retries and replays carry it.
    "BROKER_USER": unquote(urlsplit(BROKER_URL.split(";")[0]).username or "") if not _EMBEDDED_BROKER else "",
    "FILESYSTEM_DIR": FILESYSTEM_BROKER_DIR,
    "RELAY_BATCH_SIZE": env.int("RELAY_BATCH_SIZE", default=500),
    # Claim-publish-confirm loops per relay process, each with its own database connection. SQLite
    # has no SKIP LOCKED: there a second loop would only wait for the first one's write lock.
    "RELAY_PIPELINES": env.int("RELAY_PIPELINES", default=1 if DATABASE_URL.startswith("sqlite") else 2),
    # PostgreSQL wakes the relay with NOTIFY, so polling is only the fallback there; SQLite has
    # nothing but polling, and a short interval keeps the embedded saga's hops quick.
    "RELAY_POLL_INTERVAL": parse_duration(
        env.str("RELAY_POLL_INTERVAL", default="0.25" if DATABASE_URL.startswith("sqlite") else "1")
    ),
    "RELAY_CONFIRM_TIMEOUT": parse_duration(env.str("RELAY_CONFIRM_TIMEOUT", default="15")),
    "RELAY_MAX_ATTEMPTS": env.int("RELAY_MAX_ATTEMPTS", default=10),
    # Deliveries decided in one transaction, at most; never waited for (README, "Batches"). The
    # filesystem broker deletes a message as it hands it over: a consumer killed mid-batch would
    # lose the whole batch there, so the embedded mode takes one at a time.
    "CONSUMER_BATCH_SIZE": env.int("CONSUMER_BATCH_SIZE", default=1 if _EMBEDDED_BROKER else 50),
    # Unacked deliveries the broker sends one consumer process; it caps the batch.
    "CONSUMER_PREFETCH": env.int(
        "CONSUMER_PREFETCH", default=env.int("CONSUMER_BATCH_SIZE", default=20 if _EMBEDDED_BROKER else 50)
    ),
    "CONSUMER_RETRY_DELAYS": [parse_duration(d) for d in env.list("CONSUMER_RETRY_DELAYS", default=["1", "5", "30"])],
    "CONSUMER_MAX_ATTEMPTS": env.int("CONSUMER_MAX_ATTEMPTS", default=5),
    "DELIVERY_LIMIT": env.int("CONSUMER_DELIVERY_LIMIT", default=20),
    "SENSITIVE_FIELDS": env.list("SENSITIVE_FIELDS", default=["payment_token"]),
    # The keys of the fields contexts declare [encrypted] (orders' payment token, for payments
    # alone): "<key id>=<base64 of 32 random bytes>,...", the last listed encrypts, every one
    # decrypts. Every deployment of a shop gets the same list (docs/operations.md, "Security defaults").
    "ENCRYPTION_KEYS": _ENCRYPTION_KEYS,
    # During a rollout, the older version a producer writes: "<routing key>=<N>,..." (empty: the
    # newest of each event; docs/evolving-events.md).
    "EVENT_VERSIONS": env.str("EVENT_VERSIONS", default=""),
    # A folder of <event type>.v<N>.json: the schemas of the events this deployment consumes from
    # contexts whose declaration its tree does not carry (docs/schemas-snapshot/ is one). Unset:
    # every consumed event's producer is declared here.
    "EVENT_SCHEMAS_DIR": env.str("EVENT_SCHEMAS_DIR", default=""),
    "OUTBOX_RETENTION": parse_duration(env.str("OUTBOX_RETENTION", default="7d")),
    "INBOX_RETENTION": parse_duration(env.str("INBOX_RETENTION", default="14d")),
    "EVENT_LOG_RETENTION": parse_duration(env.str("EVENT_LOG_RETENTION", default="90d")),
}

# --- Business -----------------------------------------------------------------------------
CURRENCY = env.str("CURRENCY", default="USD")  # one per system: the bus checks every amount's currency
# The contexts' own settings have their defaults in their packages (<context>/conf.py, and the fake
# .env.example says what each means): set here only where the
# environment overrides one, so a deployment's values are its context's unless told otherwise.
_CONTEXT_SETTINGS = {
    # orders
    "SAGA_TIMEOUT": parse_duration,
    "IDEMPOTENCY_KEY_TTL": parse_duration,
    "IDEMPOTENCY_KEY_WAIT": parse_duration,
    # payments
    "GATEWAY_TIMEOUT": parse_duration,
    "GATEWAY_URL": str,
    "GATEWAY_PORT": int,
    "GATEWAY_CONCURRENCY": int,
    "GATEWAY_CHARGE_ATTEMPTS": int,
    # the orchestrator
    "ORCHESTRATOR_STEP_TIMEOUT": parse_duration,
    "ORCHESTRATOR_STEP_ATTEMPTS": int,
}
globals().update({name: cast(env.str(name)) for name, cast in _CONTEXT_SETTINGS.items() if env.str(name, default="")})
# Checked here, not where it is read: the gateway worker would start and never try a charge.
if env.int("GATEWAY_CHARGE_ATTEMPTS", default=1) < 1:
    raise ImproperlyConfigured(f"GATEWAY_CHARGE_ATTEMPTS must be at least 1, not {env.int('GATEWAY_CHARGE_ATTEMPTS')}")

# --- Bounds on what a hung dependency can hold (docs/operations.md, "Bounded waits") --------
# PostgreSQL limits on the relay's and the consumers' sessions (seconds; 0: not set, the
# server's own value applies). No transaction waits on the network (the gateway worker calls
# outside any), so a session idle in a transaction this long is stuck: PostgreSQL ends it.
WORKER_DATABASE_TIMEOUTS = {
    "lock_timeout": parse_duration(env.str("WORKER_LOCK_TIMEOUT", default="5")),
    "statement_timeout": parse_duration(env.str("WORKER_STATEMENT_TIMEOUT", default="15")),
    "idle_in_transaction_session_timeout": parse_duration(env.str("WORKER_IDLE_IN_TRANSACTION_TIMEOUT", default="30")),
}
# The bus reads only MESSAGING (packages/django-reliable-messaging/README.md, "Settings"):
# what it shares with the project is given to it here.
MESSAGING |= {
    "BROKER_URL": BROKER_URL,
    "BROKER_HEARTBEAT": BROKER_HEARTBEAT,
    "CONTEXTS_DIR": BASE_DIR,
    "SCHEMA_SNAPSHOT_DIR": BASE_DIR / "docs" / "schemas-snapshot",
    "CURRENCY": CURRENCY,
    "WORKER_DATABASE_TIMEOUTS": WORKER_DATABASE_TIMEOUTS,
}
# The web server's sessions (service_platform/wsgi.py; not management commands such as migrate): a
# statement ends before gunicorn's 30 s worker timeout would kill the worker and leave the
# query running, and a request stuck inside a transaction gives its locks back.
WEB_DATABASE_TIMEOUTS = {
    "statement_timeout": parse_duration(env.str("WEB_STATEMENT_TIMEOUT", default="20")),
    "idle_in_transaction_session_timeout": parse_duration(env.str("WEB_IDLE_IN_TRANSACTION_TIMEOUT", default="30")),
}

# --- API ----------------------------------------------------------------------------------
# The largest JSON body the API reads (413 beyond); a checkout of 50 lines is about 5 KiB.
API_MAX_BODY_BYTES = 256 * 1024
# Checkouts per client address (a DRF rate, or "off"). In production a client is limited by default:
# one address cannot place thousands of orders; development and the tests on DEBUG keep it off.
CHECKOUT_THROTTLE = env.str("CHECKOUT_THROTTLE", default="off" if DEBUG else "30/min")
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # ASCII JSON, every other character escaped: a client's string echoed in an error (a field
    # name that is a lone surrogate, "\ud800") cannot make the body unencodable (a 500).
    "UNICODE_JSON": False,
    "DEFAULT_PARSER_CLASSES": ["kernel.parsers.BoundedJSONParser"],
    "EXCEPTION_HANDLER": "kernel.exceptions.api_exception_handler",
    "DEFAULT_THROTTLE_RATES": {"checkout": None if CHECKOUT_THROTTLE == "off" else CHECKOUT_THROTTLE},
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # The throttle's client is REMOTE_ADDR, or the address this many proxies in front of us saw
    # (the last hops of X-Forwarded-For). DRF's default (None) trusts the whole header, which
    # lets any client pick a fresh identity per request.
    "NUM_PROXIES": env.int("NUM_PROXIES", default=0),
}
# Throttle counters live in the cache: with several web processes use a shared one
# (e.g. CACHE_URL=redis://127.0.0.1:6379/1 with the redis package, or dbcache://throttle).
CACHES = {"default": env.cache_url("CACHE_URL", default="locmemcache://")}

SPECTACULAR_SETTINGS = {
    "TITLE": "Saga shop API",
    "DESCRIPTION": (
        "Checkout starts a choreographed saga across orders, payments and inventory; the order's "
        "timeline shows every event of it. Every error body is "
        '`{"code": "...", "detail": "...", "errors": {"field": ["..."]}}` (`errors` only for validation errors).'
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {"DependencyStatusEnum": ["ok", "down"]},
    "ENUM_GENERATE_CHOICE_DESCRIPTION": False,
    "TAGS": [
        {"name": "orders", "description": "Checkout, order status and timeline, cancellation."},
        {"name": "catalogue", "description": "What can be ordered."},
        {"name": "operations", "description": "Health probes."},
    ],
}

# --- Operations ---------------------------------------------------------------------------
# Set: /metrics requires "Authorization: Bearer <token>". Unset with DEBUG off, /metrics answers 403
# (its gauges show the shop's traffic and failures) unless METRICS_PUBLIC=1 says anyone may read it.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
METRICS_PUBLIC = env.bool("METRICS_PUBLIC", default=DEBUG)

# --- The admin's login lockout (django-axes; docs/operations.md, "Admin lockout") -----------
# Axes' backend first: it refuses a locked-out account and address before any password is checked.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
# Counted from the failure that locked; 0: locked until an operator unlocks.
AXES_COOLOFF_TIME = timedelta(seconds=parse_duration(env.str("AXES_COOLOFF_TIME", default="15m"))) or None
# An attempt while locked is refused with one read and no write: axes would otherwise append each
# one's form to the row, which a client could grow without end. Restarting the cool-off on each
# would add nothing: a locked client cannot guess anyway.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]  # why: service_platform/admin_lockout.py
AXES_CLIENT_IP_CALLABLE = "service_platform.admin_lockout.client_address"
AXES_LOCKOUT_CALLABLE = "service_platform.admin_lockout.lockout_response"
AXES_RESET_ON_SUCCESS = True  # a successful login starts the count again
# No row per successful login (it would grow without end): the log lines are the audit trail.
AXES_DISABLE_ACCESS_LOG = True
AXES_SENSITIVE_PARAMETERS = []  # axes' own lines name the account and address (never the password)

# --- Static files, i18n -------------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"  # `collectstatic` fills it; WhiteNoise serves it
STATIC_ROOT.mkdir(exist_ok=True)
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
FORMAT_MODULE_PATH = ["service_platform.formats"]  # one date format on every page

# --- Logging ------------------------------------------------------------------------------
LOG_FORMAT = env.str("LOG_FORMAT", default="console")
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING_CONFIG = None  # configured in service_platform.logging once settings are loaded
from service_platform.logging import configure_logging  # noqa: E402

configure_logging(LOG_FORMAT, LOG_LEVEL)


# --- What follows from the installed contexts ---------------------------------------------
def hosting(installed_contexts: list[str]) -> dict:
    """The settings that follow from the contexts a settings module installs (each package declares
    itself in its context.toml; reliable_messaging/_declarations.py, docs/adding-a-context.md), the
    orchestrator appended where ORCHESTRATOR is on. CONTEXTS (default: all of them) picks what this
    deployment hosts; a deployment hosting fewer imports none of the others' code, has its own
    DATABASE_URL and shares the broker (docs/services.md)."""
    if ORCHESTRATOR and "orchestrator" not in installed_contexts:
        installed_contexts.append("orchestrator")
    # The installed contexts whose declarations this deployment reads: every one, unless it names its
    # CONTEXTS and reads what it consumes from EVENT_SCHEMAS_DIR (a service that joined alone): then its
    # own and those of the others its tree carries (reliable_messaging.hosting.known_packages).
    known = known_packages(
        BASE_DIR,
        tuple(installed_contexts),
        env.list("CONTEXTS", default=None),
        shared_schemas=bool(MESSAGING["EVENT_SCHEMAS_DIR"]),
    )
    try:
        declarations = read_declarations(BASE_DIR, known)
        contexts = parse_contexts(env.list("CONTEXTS", default=names(declarations)), names(declarations))
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    # A hosted context that waits for the events of a context not installed would wait forever (the
    # orchestrated saga without a participant it sends a step to): refused here, naming the one missing.
    # A deployment that joined alone knows its producers by their schemas only (EVENT_SCHEMAS_DIR).
    if not MESSAGING["EVENT_SCHEMAS_DIR"]:
        for declaration in (d for d in declarations if d.name in contexts):
            for event_type in declaration.consumes:
                if (producer := context_of(event_type)) not in names(declarations):
                    raise ImproperlyConfigured(
                        f"{declaration.name} consumes {event_type}, and {producer} is not installed "
                        f"(INSTALLED_CONTEXTS): install {producer}, or leave {declaration.name} out"
                    )
    # The other deployments' databases, where this process was told them (`make run-split` exports
    # ORDERS_/PAYMENTS_/INVENTORY_DATABASE_URL to every deployment): the order page then prints a
    # command that runs as pasted in the deployment hosting a consumer.
    deployment_database_urls = {
        name: env.str(f"{name.upper()}_DATABASE_URL")
        for name in names(declarations)
        if env.str(f"{name.upper()}_DATABASE_URL", default="")
    }
    return {
        "KNOWN_CONTEXTS": known,
        "CONTEXTS": contexts,
        "DEPLOYMENT_DATABASE_URLS": deployment_database_urls,
        "INSTALLED_APPS": [
            *PLATFORM_APPS,
            *(d.package for d in declarations if d.name in contexts),
            # Last: tracing (service_platform.telemetry) is set up once the contexts are; prepare_deployment.
            "service_platform.apps.PlatformConfig",
        ],
        # The bus reads only MESSAGING: what it is told of the contexts.
        "MESSAGING": MESSAGING
        | {"DECLARED_CONTEXTS": known, "CONTEXTS": contexts, "DEPLOYMENT_DATABASE_URLS": deployment_database_urls},
    }
