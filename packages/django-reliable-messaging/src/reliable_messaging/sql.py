"""One-statement inserts (and updates) for hot paths (publish, inbox, checkout, bulk handlers), and
statements sent together.

``Model.objects.create`` costs a model instance, signals and SQL compilation per row; on the
paths every message and every checkout takes, that was a large share of the time. Values go
through each field's own ``get_db_prep_save``, so UUIDs, JSON and datetimes are stored exactly
as the ORM would store them, on PostgreSQL and SQLite alike (``tests/integration/test_sql.py``).
"""

import json
from functools import cache

from django.db import connections
from django.db.models import JSONField, Model

Statement = tuple[str, list]


@cache
def _insert_sql(model: type[Model], names: tuple[str, ...], conflict: tuple[str, ...], returning: str | None) -> str:
    fields = [model._meta.get_field(name) for name in names]
    sql = f"INSERT INTO {model._meta.db_table} ({', '.join(f.column for f in fields)}) "
    sql += f"VALUES ({', '.join(['%s'] * len(names))})"
    return sql + _tail(model, conflict, returning)


def _tail(model: type[Model], conflict: tuple[str, ...], returning: str | None) -> str:
    tail = ""
    if conflict:
        tail += f" ON CONFLICT ({', '.join(model._meta.get_field(n).column for n in conflict)}) DO NOTHING"
    if returning:
        tail += f" RETURNING {model._meta.get_field(returning).column}"
    return tail


def insert_statement(
    model: type[Model], values: dict, *, ignore_conflict_on: tuple[str, ...] = (), returning=None, using="default"
) -> Statement:
    """The statement that inserts one row (skipping a conflict on ``ignore_conflict_on``)."""
    connection = connections[using]
    names = tuple(values)
    params = [model._meta.get_field(name).get_db_prep_save(values[name], connection) for name in names]
    return _insert_sql(model, names, ignore_conflict_on, returning), params


def rows_statement(
    model: type[Model], rows: list[dict], *, ignore_conflict_on: tuple[str, ...] = (), returning=None, using="default"
) -> Statement:
    """The statement that inserts many rows, all with the same keys.

    On PostgreSQL the rows travel as one array per column (``INSERT ... SELECT * FROM
    unnest(...)``): the statement's text is the same whatever the number of rows, so psycopg
    parses it once; a ``VALUES`` list would be a new, long text to parse for every batch.
    """
    connection = connections[using]
    names = list(rows[0])  # field names or attnames ("order_id")
    fields = [model._meta.get_field(name) for name in names]
    columns = ", ".join(f.column for f in fields)
    if connection.vendor == "postgresql":
        arrays = ", ".join(f"%s::{_array_type(f, connection)}[]" for f in fields)
        sql = f"INSERT INTO {model._meta.db_table} ({columns}) SELECT * FROM unnest({arrays})"
        params = [[_array_element(f, row[n], connection) for row in rows] for n, f in zip(names, fields, strict=True)]
    else:
        one = "(" + ", ".join(["%s"] * len(fields)) + ")"
        sql = f"INSERT INTO {model._meta.db_table} ({columns}) VALUES {', '.join([one] * len(rows))}"
        params = [f.get_db_prep_save(row[n], connection) for row in rows for n, f in zip(names, fields, strict=True)]
    return sql + _tail(model, ignore_conflict_on, returning), params


def _array_type(field, connection) -> str:
    """The element type the arrays are cast to. Not ``varchar(n)``: an explicit cast to it
    truncates silently, whereas the insert's own (assignment) cast refuses a value too long."""
    db_type = field.db_type(connection)
    return "text" if db_type.startswith(("varchar", "char")) else db_type


def _array_element(field, value, connection):
    """A value as an array element: JSON as its text (cast to ``jsonb`` by the statement)."""
    if isinstance(field, JSONField):
        return json.dumps(value, cls=field.encoder)
    return field.get_db_prep_save(value, connection)


def update_rows(objects, fields: list[str], *, using="default") -> int:
    """Write ``fields`` of many rows of one model in one statement; the number of rows updated.

    Django's ``bulk_update`` builds a ``CASE WHEN`` per row and field, and resolving those
    expressions cost more CPU than the updates saved. On PostgreSQL the values travel as one
    array per column (``UPDATE ... FROM unnest(...)``), so the statement's text is the same
    whatever the number of rows. An ``auto_now`` field among ``fields`` is set to now, as
    ``save()`` would. Elsewhere (SQLite): ``bulk_update``.
    """
    objects = list(objects)
    if not objects:
        return 0
    model = type(objects[0])
    connection = connections[using]
    updated = [model._meta.get_field(name) for name in fields]
    for obj in objects:
        for field in updated:
            field.pre_save(obj, False)  # auto_now: now, set on the object too
    if connection.vendor != "postgresql":
        return model.objects.using(using).bulk_update(objects, fields)
    pk = model._meta.pk
    columns = [pk, *updated]
    arrays = ", ".join(f"%s::{_array_type(f, connection)}[]" for f in columns)
    names = ", ".join(f"v{n}" for n in range(len(columns)))
    table = model._meta.db_table
    sql = (
        f"UPDATE {table} SET {', '.join(f'{f.column} = v.v{n}' for n, f in enumerate(updated, 1))} "
        f"FROM unnest({arrays}) AS v({names}) WHERE {table}.{pk.column} = v.v0"
    )
    params = [[_array_element(f, getattr(obj, f.attname), connection) for obj in objects] for f in columns]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def insert_row(model: type[Model], values: dict, *, ignore_conflict_on: tuple[str, ...] = (), using="default") -> bool:
    """Insert one row; with ``ignore_conflict_on``, False when that key already exists."""
    statement = insert_statement(model, values, ignore_conflict_on=ignore_conflict_on, using=using)
    return execute_together([statement], using=using) == 1


def insert_rows(
    model: type[Model],
    rows: list[dict],
    *,
    ignore_conflict_on: tuple[str, ...] = (),
    returning: str | None = None,
    using="default",
) -> set:
    """Insert many rows in one statement; with ``returning``, that column's values of the rows
    actually inserted."""
    if not rows:
        return set()
    sql, params = rows_statement(model, rows, ignore_conflict_on=ignore_conflict_on, returning=returning, using=using)
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()} if returning else set()


def execute_together(statements: list[Statement], *, using="default") -> int:
    """Run ``statements`` in order; the number of rows the last one affected (or returned).

    On PostgreSQL they go as one execute, one round trip (client-side binding allows several
    statements); SQLite runs one statement per execute, so there they go one after another.
    """
    connection = connections[using]
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            for sql, params in statements:
                cursor.execute(sql, params)
        else:
            cursor.execute("; ".join(sql for sql, _ in statements), [p for _, params in statements for p in params])
            for _ in statements[1:]:
                cursor.nextset()
        # SQLite knows the count of an INSERT ... RETURNING only once its rows are fetched.
        return len(cursor.fetchall()) if " RETURNING " in statements[-1][0] else cursor.rowcount
