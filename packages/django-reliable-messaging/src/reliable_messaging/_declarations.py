"""The bounded contexts, as each one declares itself in ``<package>/context.toml``.

A context's declaration is data, not code: its name, the routing keys its queue is bound to
and the handler of each (``consumes``; ``obeys`` for commands bound only where their sender is
installed), the events it publishes (each with a kind, from the host's ``EVENT_KINDS``), its
commands, what its deployment runs and migrates, and the keys the host adds
(``DECLARATION_KEYS``, read back from ``extra``). ``MESSAGING["DECLARED_CONTEXTS"]``
lists the declared packages; ``CONTEXTS`` picks the ones a deployment hosts.

A deployment reads the declarations of the contexts it hosts and of every other installed
context whose declaration its tree carries (``known_packages``): each relay and consumer
declares the queues of all of them (a message then has a queue to wait in, whichever of them
starts first), and a command of a context hosted elsewhere says where it lives. A deployment
that names its ``CONTEXTS`` and sets ``EVENT_SCHEMAS_DIR`` may carry no other context's
declaration at all: it then declares only its own queues and reads the events it consumes with the schemas it carries
(``EVENT_SCHEMAS_DIR``), and joins a running system without any other deployment changing
(docs/adding-a-context.md). Code it carries only for its own contexts.

The naming rule, in one place: a context named ``N`` consumes as the consumer ``N`` from the
queue ``N_queue``, writes its outbox rows with ``source`` ``N``, and publishes only event types
``N.<aggregate>.<event>``; so the first segment of an event type names its producer
(``context_of``).
"""

import re
import tomllib
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from reliable_messaging._conf import MAX_WAIT_SECONDS, contexts_dir, setting
from reliable_messaging._edge import MAX_ATTEMPT

DECLARATION_FILE = "context.toml"
# The event log's consumer (messaging's own, bound to every key) takes this name.
RESERVED_NAMES = frozenset({"events"})
CONTEXT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
EVENT_TYPE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*){2}$")


class DeclarationError(ValueError):
    """A context's declaration is missing or wrong; the message names the file and the fix."""


@dataclass(frozen=True)
class Breaker:
    """After ``failures`` transient failures of a handler in a row, its messages wait ``cool_down``
    seconds, then one is tried: a success closes the breaker, a failure opens it again."""

    failures: int = 5
    cool_down: float = 30.0


@dataclass(frozen=True)
class HandlerPolicy:
    """A handler's retries and breaker, as its context declares them (``[handlers."<handler>"]``).

    Nothing of it is a queue argument: a retry carries its own wait (reliable_messaging._broker),
    so deployments of other policies share a broker, and a policy changes with a rolling restart.
    ``None``: the settings' value, read when it is used (``CONSUMER_MAX_ATTEMPTS``, ``CONSUMER_RETRY_DELAYS``).
    """

    attempts: int | None = None
    delays: tuple[float, ...] | None = None
    # dotted exception classes (resolved when the handler is registered): a dead letter at once
    never_retry: tuple[str, ...] = ()
    breaker: Breaker | None = None

    def max_attempts(self) -> int:
        attempts: int = self.attempts or setting("CONSUMER_MAX_ATTEMPTS")
        return attempts

    def delay_after(self, attempt: int) -> float:
        """The wait before attempt ``attempt + 1`` (``attempt`` 1-based): the last delay repeats."""
        delays = self.delays or tuple(setting("CONSUMER_RETRY_DELAYS"))
        return float(delays[min(attempt, len(delays)) - 1])


class Personal(NamedTuple):
    """An event's personal data: the field naming its subject, the fields sealed under that
    subject's key, and the consumers that may read them (where they share the producer's database)."""

    subject: str
    fields: tuple[str, ...]
    readers: tuple[str, ...]


@dataclass(frozen=True)
class ContextDeclaration:
    name: str
    package: str
    # routing key -> "module.function" of its handler (a module of this package)
    consumes: dict[str, str] = field(default_factory=dict)
    # the commands it obeys, sent by a context that may not be installed:
    # routing key -> handler, added to ``consumes`` only where their sender is installed
    obeys: dict[str, str] = field(default_factory=dict)
    # event type -> its kind (one of the host's EVENT_KINDS, when it names them)
    publishes: dict[str, str] = field(default_factory=dict)
    # management commands this context brings
    commands: tuple[str, ...] = ()
    # its URL module, served under api/ (with the API's schema and docs) where it is hosted
    urls: str = ""
    # where it is hosted also runs messaging's event log (the timeline reads it)
    event_log: bool = False
    # the host's own keys (``DECLARATION_KEYS``: key -> default), each with its value here
    extra: dict[str, object] = field(default_factory=dict)
    # its deployment's extra database aliases to migrate, commands to run once after migrating
    # (e.g. seed data), and long-running processes beside web, relay and consumers: name -> args
    databases: tuple[str, ...] = ()
    setup: tuple[tuple[str, ...], ...] = ()
    processes: dict[str, str] = field(default_factory=dict)
    # the folder (in this package) of its events' JSON Schemas, one file per event and version:
    # <event type>.v<N>.json (docs/evolving-events.md); data every deployment's tree carries
    schemas: str = ""
    # routing key it consumes -> its upcasters, one per step: [v1 -> v2, v2 -> v3, ...]
    upcasters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # event type it publishes -> its downcasters, one per step: [v2 -> v1, v3 -> v2, ...]
    # (EVENT_VERSIONS pins an older version during a rollout)
    downcasters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # handler (as consumes and obeys name it) -> its retries and breaker; a handler not here: the settings'
    handlers: dict[str, HandlerPolicy] = field(default_factory=dict)
    # event type it publishes -> its encrypted fields -> the consumers that may read each
    # (``[encrypted."<event type>"]``, field = [consumers]: reliable_messaging._field_crypto)
    encrypted: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    # event type it publishes -> the field naming whose data it is, and the fields encrypted under
    # that subject's own key (``[personal."<event type>"]``: reliable_messaging._subject_keys)
    personal: dict[str, Personal] = field(default_factory=dict)

    @property
    def queue(self) -> str:
        return f"{self.name}_queue"

    @property
    def runs_consumer(self) -> bool:
        return bool(self.consumes) or self.event_log


def context_of(event_type: str) -> str:
    """The context that publishes ``event_type``: its first segment (the naming rule above)."""
    return event_type.split(".", 1)[0]


# The keys of context.toml the bus reads; any other is the host's.
_BUS_KEYS = frozenset(ContextDeclaration.__dataclass_fields__) - {"package", "extra"}


def read_declaration(base_dir: Path, package: str) -> ContextDeclaration:
    path = base_dir.joinpath(*package.split(".")) / DECLARATION_FILE
    where = path.relative_to(base_dir) if path.is_relative_to(base_dir) else path
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise DeclarationError(
            f"{where} is missing: a deployment's tree carries the declaration of every context it hosts "
            f"(and a monolith every declared one: MESSAGING['DECLARED_CONTEXTS']); copy it or remove {package!r} "
            f"from that list"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise DeclarationError(f"{where}: {exc}") from None

    def fail(problem: str) -> NoReturn:
        raise DeclarationError(f"{where}: {problem}")

    # Any other key is the host's (DECLARATION_KEYS), checked once settings are loaded (check_host_keys).
    extra = {key: value for key, value in data.items() if key not in _BUS_KEYS}
    name = data.get("name", "")
    if not CONTEXT_NAME.match(name) or name in RESERVED_NAMES:
        fail(f"name {name!r} must be lower_snake_case and not one of {sorted(RESERVED_NAMES)}")
    consumes, obeys = dict(data.get("consumes", {})), dict(data.get("obeys", {}))
    for table, keys in (("consumes", consumes), ("obeys", obeys)):
        for key, handler in keys.items():
            if not EVENT_TYPE.match(key):
                fail(f"{table} {key!r}: a routing key is <context>.<aggregate>.<event>")
            if not (isinstance(handler, str) and handler.startswith(f"{package}.") and handler.count(".") >= 2):
                fail(f"{table} {key!r}: the handler must be '{package}.<module>.<function>', not {handler!r}")
    publishes = dict(data.get("publishes", {}))
    for event_type, kind in publishes.items():
        if not EVENT_TYPE.match(event_type) or context_of(event_type) != name:
            fail(f"publishes {event_type!r}: a context publishes only '{name}.<aggregate>.<event>'")
        if not isinstance(kind, str) or not kind:
            fail(f"publishes {event_type!r}: the kind is a text, not {kind!r}")
    # A command obeyed has versions as an event consumed does, and needs its upcasters alike.
    upcasters = _functions_of(
        data.get("upcasters", {}), {*consumes, *obeys}, "upcasters", "consumes or obeys", package, fail
    )
    downcasters = _functions_of(data.get("downcasters", {}), publishes, "downcasters", "publishes", package, fail)
    handlers = {
        handler: _policy_of(table, f"handlers {handler!r}", fail)
        for handler, table in _table(data.get("handlers", {}), "handlers", fail).items()
    }
    if undeclared := sorted(set(handlers) - set(consumes.values()) - set(obeys.values())):
        fail(f"handlers {undeclared[0]!r}: not a handler under consumes or obeys")
    encrypted = _encrypted_of(data.get("encrypted", {}), publishes, fail)
    personal = _personal_of(data.get("personal", {}), publishes, encrypted, fail)
    schemas = data.get("schemas", "")
    if not isinstance(schemas, str) or (schemas and not (path.parent / schemas).is_dir()):
        fail(f"schemas {schemas!r}: the folder of its events' JSON Schemas, in its package")
    return ContextDeclaration(
        name=name,
        package=package,
        consumes=consumes,
        obeys=obeys,
        publishes=publishes,
        commands=tuple(data.get("commands", ())),
        urls=str(data.get("urls", "")),
        event_log=bool(data.get("event_log", False)),
        extra=extra,
        databases=tuple(data.get("databases", ())),
        setup=tuple(tuple(command.split()) for command in data.get("setup", ())),
        processes=dict(data.get("processes", {})),
        schemas=schemas,
        upcasters=upcasters,
        downcasters=downcasters,
        handlers=handlers,
        encrypted=encrypted,
        personal=personal,
    )


def _encrypted_of(
    value: object, publishes: Container[str], fail: Callable[[str], NoReturn]
) -> dict[str, dict[str, tuple[str, ...]]]:
    """``[encrypted."<event type>"]``: field = [consumers], for events under publishes."""
    encrypted = {}
    for event_type, fields in _table(value, "encrypted", fail).items():
        if event_type not in publishes:
            fail(f"encrypted {event_type!r}: not under publishes")
        readers_of = {}
        for name, readers in _table(fields, f"encrypted {event_type!r}", fail).items():
            names = readers if isinstance(readers, list) else []
            if not (names and all(isinstance(r, str) and CONTEXT_NAME.match(r) for r in names)):
                fail(
                    f"encrypted {event_type!r}: {name} = {readers!r}: a non-empty list of the consumers "
                    "(context names) that may read it"
                )
            readers_of[name] = tuple(readers)
        encrypted[event_type] = readers_of
    return encrypted


def _personal_of(
    value: object,
    publishes: Container[str],
    encrypted: dict[str, dict[str, tuple[str, ...]]],
    fail: Callable[[str], NoReturn],
) -> dict[str, Personal]:
    """``[personal."<event type>"]``: ``subject`` = a field, ``fields`` = [fields], ``readers`` =
    [consumers] (none if not given), for events under publishes."""
    personal = {}
    for event_type, table in _table(value, "personal", fail).items():
        if event_type not in publishes:
            fail(f"personal {event_type!r}: not under publishes")
        table = _table(table, f"personal {event_type!r}", fail)
        subject, fields, readers = table.get("subject"), table.get("fields"), table.get("readers", [])
        if unknown := sorted(set(table) - {"subject", "fields", "readers"}):
            fail(f"personal {event_type!r}: {unknown[0]!r} is not a key: give subject, fields and readers")
        if not (isinstance(subject, str) and subject):
            fail(f"personal {event_type!r}: subject = {subject!r}: the name of the field naming whose data it is")
        if not (isinstance(fields, list) and fields and all(isinstance(f, str) and f for f in fields)):
            fail(f"personal {event_type!r}: fields = {fields!r}: a non-empty list of the fields to encrypt")
        if not (isinstance(readers, list) and all(isinstance(r, str) and CONTEXT_NAME.match(r) for r in readers)):
            fail(
                f"personal {event_type!r}: readers = {readers!r}: a list of the consumers (context names) "
                "that may read them"
            )
        if both := sorted(set(fields) & set(encrypted.get(event_type, {}))):
            fail(f"personal {event_type!r}: {both[0]!r} is under encrypted too: a field has one key")
        personal[event_type] = Personal(subject, tuple(fields), tuple(sorted(readers)))
    return personal


def _table(value: object, where: str, fail: Callable[[str], NoReturn]) -> dict[str, Any]:
    if not isinstance(value, dict):
        fail(f"{where}: a table, not {value!r}")
    return value


def _seconds(value: object, where: str, fail: Callable[[str], NoReturn]) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_WAIT_SECONDS:
        fail(f"{where} = {value!r}: seconds, more than 0 and at most {MAX_WAIT_SECONDS:.0f}")
    return float(value)


def _count(value: object, where: str, fail: Callable[[str], NoReturn]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPT:
        fail(f"{where} = {value!r}: an integer from 1 to {MAX_ATTEMPT}")
    return value


def _policy_of(value: object, where: str, fail: Callable[[str], NoReturn]) -> HandlerPolicy:
    """``[handlers."<handler>"]``: attempts, delays, never_retry, breaker = {failures, cool_down}."""
    table = _table(value, where, fail)
    if unknown := sorted(set(table) - {"attempts", "delays", "never_retry", "breaker"}):
        fail(f"{where}: unknown key {unknown[0]!r} (attempts, delays, never_retry, breaker)")
    delays = table.get("delays")
    if delays is not None and (not isinstance(delays, list) or not delays):
        fail(f"{where}: delays = {delays!r}: a list of seconds, one per retry (the last repeats)")
    never_retry = table.get("never_retry", [])
    if not isinstance(never_retry, list) or not all(isinstance(n, str) and DOTTED.match(n) for n in never_retry):
        fail(f"{where}: never_retry = {never_retry!r}: a list of dotted exception classes ('module.Class')")
    breaker = None
    if "breaker" in table:
        given = _table(table["breaker"], f"{where}: breaker", fail)
        if unknown := sorted(set(given) - {"failures", "cool_down"}):
            fail(f"{where}: breaker: unknown key {unknown[0]!r} (failures, cool_down)")
        breaker = Breaker(
            failures=_count(given.get("failures", Breaker.failures), f"{where}: breaker.failures", fail),
            cool_down=_seconds(given.get("cool_down", Breaker.cool_down), f"{where}: breaker.cool_down", fail),
        )
    return HandlerPolicy(
        attempts=_count(table["attempts"], f"{where}: attempts", fail) if "attempts" in table else None,
        delays=tuple(_seconds(d, f"{where}: delays", fail) for d in delays) if delays is not None else None,
        never_retry=tuple(never_retry),
        breaker=breaker,
    )


def _functions_of(
    table: Any, keys: Container[str], what: str, where: str, package: str, fail: Callable[[str], NoReturn]
) -> dict[str, tuple[str, ...]]:
    """A table of event type -> a list of functions of this package, for event types under ``where``."""
    functions = {}
    for event_type, dotted in dict(table).items():
        if event_type not in keys:
            fail(f"{what} {event_type!r}: not under {where}")
        if not isinstance(dotted, list) or not all(
            isinstance(f, str) and f.startswith(f"{package}.") and f.count(".") >= 2 for f in dotted
        ):
            fail(f"{what} {event_type!r}: a list of '{package}.<module>.<function>', one per version step")
        functions[event_type] = tuple(dotted)
    return functions


def check_host_keys() -> None:
    """At start-up: each declaration's keys beyond the bus's are the host's (``DECLARATION_KEYS``,
    of the type of their default), and its events' kinds are the host's ``EVENT_KINDS``, if named."""
    host_keys, kinds = setting("DECLARATION_KEYS"), setting("EVENT_KINDS")
    for declaration in installed():
        where = f"{declaration.package}/{DECLARATION_FILE}"
        if unknown := sorted(set(declaration.extra) - set(host_keys)):
            raise DeclarationError(
                f"{where}: unknown keys {unknown} (a host's own keys: MESSAGING['DECLARATION_KEYS'])"
            )
        for key, value in declaration.extra.items():
            if type(value) is not type(default := host_keys[key]):
                wanted = type(default).__name__
                raise DeclarationError(
                    f"{where}: {key} = {value!r}: a {wanted}, as MESSAGING['DECLARATION_KEYS'] has it"
                )
        for event_type, kind in declaration.publishes.items():
            if kinds and kind not in kinds:
                raise DeclarationError(f"{where}: publishes {event_type!r}: kind {kind!r} is not one of {list(kinds)}")


def schema_folder(base_dir: Path, declaration: ContextDeclaration) -> Path | None:
    """Where ``declaration``'s event schemas are, if it declares them."""
    if not declaration.schemas:
        return None
    return base_dir.joinpath(*declaration.package.split(".")) / declaration.schemas


@cache
def read_declarations(base_dir: Path, packages: tuple[str, ...]) -> tuple[ContextDeclaration, ...]:
    """The declarations of ``packages``, in their order, checked against each other."""
    declarations = tuple(read_declaration(base_dir, package) for package in packages)
    seen: dict[str, str] = {}
    for declaration in declarations:
        if declaration.name in seen:
            raise DeclarationError(f"{declaration.package} and {seen[declaration.name]} are both {declaration.name!r}")
        seen[declaration.name] = declaration.package
    owners: dict[str, str] = {}
    for declaration in declarations:
        for command in declaration.commands:
            if command in owners:
                raise DeclarationError(f"command {command} is declared by {owners[command]} and {declaration.name}")
            owners[command] = declaration.name
    # The commands a context obeys are bound and handled only where their sender is installed.
    return tuple(
        replace(d, consumes={**d.consumes, **{k: h for k, h in d.obeys.items() if context_of(k) in seen}})
        for d in declarations
    )


def declaration_path(base_dir: Path, package: str) -> Path:
    return base_dir.joinpath(*package.split(".")) / DECLARATION_FILE


def known_packages(
    base_dir: Path, packages: tuple[str, ...], contexts: list[str] | None, *, shared_schemas: bool = False
) -> tuple[str, ...]:
    """The installed packages whose declarations this deployment reads: all of them (a missing one
    is an error, naming the file), unless it names its ``contexts`` and reads what it consumes
    from a shared schema folder (``shared_schemas``: ``EVENT_SCHEMAS_DIR`` set), the deployment
    that joined alone: then its own (required) and those of the others its tree carries."""
    if contexts is None or not shared_schemas:
        return packages
    wanted = {name.strip() for name in contexts}
    return tuple(p for p in packages if declaration_path(base_dir, p).exists() or p.rsplit(".", 1)[-1] in wanted)


def installed() -> tuple[ContextDeclaration, ...]:
    """The declaration of every installed context this deployment knows (hosted here or not;
    ``known_packages``), in the order of ``MESSAGING["DECLARED_CONTEXTS"]``."""
    return read_declarations(contexts_dir(), tuple(setting("DECLARED_CONTEXTS")))


def hosted() -> tuple[ContextDeclaration, ...]:
    """The declarations of the contexts this deployment hosts (``CONTEXTS``)."""
    return tuple(d for d in installed() if d.name in hosted_names())


def hosted_names() -> list[str]:
    """The names of the contexts this deployment hosts: ``MESSAGING["CONTEXTS"]``, else every declared one."""
    names_given = setting("CONTEXTS")
    return list(names_given) if names_given is not None else [d.name for d in installed()]


def names(declarations: Iterable[ContextDeclaration]) -> list[str]:
    return [d.name for d in declarations]


def command_owners() -> dict[str, str]:
    """Each installed context's commands -> the context that brings it."""
    return {command: d.name for d in installed() for command in d.commands}


def event_kind(event_type: str) -> str:
    """The kind ``event_type``'s producer declared; '' for an event no installed context publishes."""
    for declaration in installed():
        if event_type in declaration.publishes:
            return declaration.publishes[event_type]
    return ""


def parse_contexts(requested: list[str], available: list[str]) -> list[str]:
    """``CONTEXTS`` as given, checked, in the installed order; ValueError names what is wrong."""
    wanted = {name.strip() for name in requested if name.strip()}
    if unknown := sorted(wanted - set(available)):
        raise ValueError(f"CONTEXTS names unknown contexts {unknown}; choose among {', '.join(available)}")
    if not wanted:
        raise ValueError(f"CONTEXTS is empty; choose among {', '.join(available)}")
    return [name for name in available if name in wanted]
