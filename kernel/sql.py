"""One-statement inserts for hot paths (publish, inbox, checkout claim).

``Model.objects.create`` costs a model instance, signals and SQL compilation per row; on the
paths every message and every checkout takes, that was a large share of the time. Values go
through each field's own ``get_db_prep_save``, so UUIDs, JSON and datetimes are stored exactly
as the ORM would store them, on PostgreSQL and SQLite alike.
"""

import json
from functools import cache

from django.db import connections
from django.db.models import JSONField, Model


@cache
def _statement(model: type[Model], names: tuple[str, ...], conflict: tuple[str, ...], vendor: str) -> str:
    table = model._meta.db_table
    columns = ", ".join(model._meta.get_field(name).column for name in names)
    placeholders = ", ".join(["%s"] * len(names))
    sql = f"INSERT INTO {table} ({columns}) VALUES ({placeholders})"
    if conflict:
        targets = ", ".join(model._meta.get_field(name).column for name in conflict)
        sql += f" ON CONFLICT ({targets}) DO NOTHING"
    return sql


def insert_row(model: type[Model], values: dict, *, ignore_conflict_on: tuple[str, ...] = (), using="default") -> bool:
    """Insert one row; with ``ignore_conflict_on``, False when that key already exists."""
    connection = connections[using]
    names = tuple(values)
    params = [model._meta.get_field(name).get_db_prep_save(values[name], connection) for name in names]
    with connection.cursor() as cursor:
        cursor.execute(_statement(model, names, ignore_conflict_on, connection.vendor), params)
        return cursor.rowcount == 1


def insert_rows(
    model: type[Model],
    rows: list[dict],
    *,
    ignore_conflict_on: tuple[str, ...] = (),
    returning: str | None = None,
    using="default",
) -> set:
    """Insert many rows (all with the same keys) in one statement; with ``returning``, that
    column's values of the rows actually inserted.

    On PostgreSQL the rows travel as one array per column (``INSERT ... SELECT * FROM
    unnest(...)``): the statement's text is the same whatever the number of rows, so psycopg
    parses it once; a ``VALUES`` list would be a new, long text to parse for every batch.
    """
    if not rows:
        return set()
    connection = connections[using]
    fields = [model._meta.get_field(name) for name in rows[0]]
    columns = ", ".join(f.column for f in fields)
    if connection.vendor == "postgresql":
        arrays = ", ".join(f"%s::{f.db_type(connection)}[]" for f in fields)
        sql = f"INSERT INTO {model._meta.db_table} ({columns}) SELECT * FROM unnest({arrays})"
        params = [[_db_value(field, row[field.name], connection) for row in rows] for field in fields]
    else:
        one = "(" + ", ".join(["%s"] * len(fields)) + ")"
        sql = f"INSERT INTO {model._meta.db_table} ({columns}) VALUES {', '.join([one] * len(rows))}"
        params = [field.get_db_prep_save(row[field.name], connection) for row in rows for field in fields]
    if ignore_conflict_on:
        sql += f" ON CONFLICT ({', '.join(model._meta.get_field(n).column for n in ignore_conflict_on)}) DO NOTHING"
    if returning:
        sql += f" RETURNING {model._meta.get_field(returning).column}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()} if returning else set()


def _db_value(field, value, connection):
    """A value as an array element: JSON as its text (cast to ``jsonb`` by the statement)."""
    if isinstance(field, JSONField):
        return json.dumps(value, cls=field.encoder)
    return field.get_db_prep_save(value, connection)
