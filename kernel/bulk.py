"""Many rows written at once: changed rows of one model (``bulk_save``), new rows of several
(``insert_together``)."""

from collections.abc import Iterable, Sequence
from functools import cache, lru_cache

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Field, Model


def bulk_save(objects: Iterable[Model], fields: list[str]) -> None:
    """Write ``fields`` of ``objects`` (rows of one model, read and locked in this transaction) in
    one statement, as ``save(update_fields=fields)`` would write each: an ``auto_now`` field among
    ``fields`` is set to now, on the object too.

    Django's ``bulk_update`` builds a ``CASE WHEN`` per row and field: for 50 rows of 8 fields it
    took about 15 times the CPU of this, and as long again in PostgreSQL. This is ``bulk_create``'s
    ``INSERT ... ON CONFLICT (pk) DO UPDATE`` of ``fields`` only: every row exists (it is locked),
    so each conflicts and is updated; nothing is inserted.
    """
    objects = list(objects)
    if not objects:
        return
    model = type(objects[0])
    if others := {type(obj).__name__ for obj in objects if type(obj) is not model}:
        raise TypeError(f"bulk_save() takes rows of one model: {model.__name__}, not {', '.join(sorted(others))}")
    if any(obj._state.adding for obj in objects):
        raise ValueError(f"bulk_save() writes {model.__name__} rows read from the database, not new ones")
    # The insert stamps every auto_now(_add) field on the objects; those not written keep their value.
    stamped = [
        f.attname
        for f in model._meta.concrete_fields
        if (getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)) and f.name not in fields
    ]
    kept = [[getattr(obj, name) for name in stamped] for obj in objects]
    # The base manager, as save() uses: a default manager's filter skips no row.
    model._base_manager.bulk_create(
        objects, update_conflicts=True, unique_fields=[model._meta.pk.name], update_fields=fields
    )
    for obj, values in zip(objects, kept, strict=True):
        for name, value in zip(stamped, values, strict=True):
            setattr(obj, name, value)


def insert_together(*groups: Sequence[Model], using: str = DEFAULT_DB_ALIAS) -> None:
    """Insert ``groups`` of new rows (each a list of one model's rows, parents before children) as
    ``bulk_create`` would: ``pre_save`` stamps ``auto_now`` fields, a primary key the database
    generates is set on its object, no signal is sent. On PostgreSQL in one statement, an
    ``INSERT`` per group in a ``WITH``, whose text is built once per process per shape: checkout's
    order and its lines through the ORM cost twice the client CPU of this (docs/benchmarks.md,
    figure 6). Elsewhere one ``bulk_create`` per group."""
    groups = tuple(list(group) for group in groups if group)
    if not groups:
        return
    for group in groups:
        model = type(group[0])
        if others := {type(obj).__name__ for obj in group if type(obj) is not model}:
            raise TypeError(
                f"insert_together() takes one model per group: {model.__name__}, not {', '.join(sorted(others))}"
            )
    connection = connections[using]
    if connection.vendor != "postgresql":
        for group in groups:
            type(group[0])._base_manager.using(using).bulk_create(group)
        return
    shape = tuple((type(group[0]), len(group), _generated_keys(group)) for group in groups)
    values = [
        field.get_db_prep_save(field.pre_save(obj, add=True), connection)
        for group, (model, _, generated) in zip(groups, shape, strict=True)
        for obj in group
        for field in _inserted_fields(model, generated)
    ]
    with connection.cursor() as cursor:
        cursor.execute(_insert_together_sql(shape, using), values)
        keys = cursor.fetchall()
    returned = iter(keys)
    for group, (model, _, generated) in zip(groups, shape, strict=True):
        for obj in group:
            if generated:
                setattr(obj, model._meta.pk.attname, model._meta.pk.to_python(next(returned)[0]))
            obj._state.adding, obj._state.db = False, using


def _generated_keys(group: list[Model]) -> bool:
    """Whether the database makes the group's primary keys (an auto field left ``None``)."""
    unset = [obj.pk is None for obj in group]
    if any(unset) and not (all(unset) and group[0]._meta.pk.db_returning):
        raise ValueError(f"insert_together(): every {type(group[0]).__name__} row needs its primary key set, or none")
    return all(unset)


@cache
def _inserted_fields(model: type[Model], generated: bool) -> list[Field]:
    return [f for f in model._meta.concrete_fields if not f.generated and not (generated and f.primary_key)]


@lru_cache(maxsize=256)  # one text per shape: per model and count of rows
def _insert_together_sql(shape: tuple[tuple[type[Model], int, bool], ...], using: str) -> str:
    quote = connections[using].ops.quote_name
    inserts, keys = [], []
    for i, (model, count, generated) in enumerate(shape):
        fields = _inserted_fields(model, generated)
        row = f"({', '.join(['%s'] * len(fields))})"
        insert = f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        insert += f"VALUES {', '.join([row] * count)}"
        if generated:  # keys come back in the order of the VALUES, as bulk_create reads them
            insert += f" RETURNING {quote(model._meta.pk.column)}"
            keys.append(f"SELECT {quote(model._meta.pk.column)}::text FROM w{i}")  # as text: one column for all
        inserts.append(f"w{i} AS ({insert})")
    return f"WITH {', '.join(inserts)} {' UNION ALL '.join(keys) or 'SELECT 1 WHERE false'}"
