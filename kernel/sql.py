"""One-statement inserts for hot paths (publish, inbox, checkout claim).

``Model.objects.create`` costs a model instance, signals and SQL compilation per row; on the
paths every message and every checkout takes, that was a large share of the time. Values go
through each field's own ``get_db_prep_save``, so UUIDs, JSON and datetimes are stored exactly
as the ORM would store them, on PostgreSQL and SQLite alike.
"""

from functools import cache

from django.db import connections
from django.db.models import Model


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


def insert_rows_returning(
    model: type[Model], rows: list[dict], *, ignore_conflict_on: tuple[str, ...], returning: str, using="default"
) -> set:
    """Insert many rows in one statement, skipping conflicts; the ``returning`` values of those
    actually inserted (PostgreSQL and SQLite both have ``RETURNING``)."""
    if not rows:
        return set()
    connection = connections[using]
    names = tuple(rows[0])
    fields = [model._meta.get_field(name) for name in names]
    params = [field.get_db_prep_save(row[field.name], connection) for row in rows for field in fields]
    table = model._meta.db_table
    one = "(" + ", ".join(["%s"] * len(names)) + ")"
    sql = (
        f"INSERT INTO {table} ({', '.join(f.column for f in fields)}) VALUES {', '.join([one] * len(rows))} "
        f"ON CONFLICT ({', '.join(model._meta.get_field(n).column for n in ignore_conflict_on)}) DO NOTHING "
        f"RETURNING {model._meta.get_field(returning).column}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}
