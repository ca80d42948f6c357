"""The monolith's settings: the platform's (service_platform/settings.py, every variable of
``.env.example``), every context of this repository installed, and what only this checkout runs:
the fake card gateway (a development service) and the development tooling (devtools/).
"""

from service_platform.settings import *  # noqa: F403
from service_platform.settings import DATABASE_URL, DATABASES, DEBUG, database, env, hosting, sqlite_folder

# The one list of installed contexts (docs/adding-a-context.md): the orchestrator joins where ORCHESTRATOR
# is on (docs/sagas.md). CONTEXTS (default: all of them) picks what this deployment hosts.
INSTALLED_CONTEXTS = [
    "orders",
    "payments",
    "inventory",
    "shipping",
]
# Benchmarks only: `make bench` sets BENCH_APP=1 (never set it in production).
if env.bool("BENCH_APP", default=False):
    INSTALLED_CONTEXTS.append("bench.benchapp")
globals().update(hosting(INSTALLED_CONTEXTS))

# The fake card gateway (fake_gateway/: a development service of its own, not a context; payments knows
# only its HTTP API): installed beside payments in development and the tests (DEBUG), or where
# FAKE_GATEWAY=1 says so (the benchmarks run it with DEBUG off). A production deployment leaves it
# out and sets GATEWAY_URL to its card gateway: it needs neither the app nor its database alias.
FAKE_GATEWAY = env.bool("FAKE_GATEWAY", default=DEBUG) and "payments" in CONTEXTS  # noqa: F405
if FAKE_GATEWAY:
    INSTALLED_APPS.append("fake_gateway")  # noqa: F405
    # Its ledger on a database alias of its own, so a rollback of a caller's transaction cannot undo a
    # charge (as with a real card). On PostgreSQL it shares the database (Django treats the identical
    # alias as the same test database); on SQLite it gets its own file, gateway.sqlite3 beside the
    # database, which run_fake_gateway migrates. Only the fake gateway's service and gateway_ledger use
    # it, on dedicated connections: no second pool.
    _default_gateway_url = f"sqlite:///{sqlite_folder / 'gateway.sqlite3'}" if sqlite_folder else DATABASE_URL
    DATABASES["gateway"] = database(env.str("GATEWAY_DATABASE_URL", default=_default_gateway_url), pool=False)
    if "TEST" in DATABASES["default"] and DATABASES["gateway"]["NAME"] == DATABASES["default"]["NAME"]:
        DATABASES["gateway"]["TEST"] = dict(DATABASES["default"]["TEST"])
    # "inprocess:" as GATEWAY_URL is the in-process stand-in of the unit and integration tiers (no HTTP,
    # the same ledger): the object GATEWAY_IN_PROCESS names.
    GATEWAY_IN_PROCESS = "fake_gateway.in_process.gateway"
# Its settings' defaults are in fake_gateway/conf.py: set here only where the environment overrides one.
globals().update(
    {
        name: float(env.str(name))
        for name in ("FAKE_GATEWAY_LATENCY", "FAKE_GATEWAY_TIMEOUT_RATE")
        if env.str(name, default="")
    }
)

# The scaffolder and the import contracts' generator (startcontext, import_contracts): this checkout's
# development tooling, with or without DEBUG as before; a service's tree never carries it.
INSTALLED_APPS.append("devtools")  # noqa: F405

# Benchmarks only: the bench's URLs (BENCH_APP=1 installed its context above).
if "bench.benchapp" in INSTALLED_APPS:  # noqa: F405
    ROOT_URLCONF = "bench.benchapp.urls"
