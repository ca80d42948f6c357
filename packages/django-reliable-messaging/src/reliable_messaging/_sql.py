"""One-statement inserts for the bus's hot paths (publish, the inbox, a batch's outbox rows), one
statement updating many rows (the saga engine's moves), and statements sent together. Private
to the bus: a host writes its own rows through the ORM.

``Model.objects.create`` costs a model instance, signals and SQL compilation per row; on the
paths every message takes, that was a large share of the time. Values go
through each field's own ``get_db_prep_save``, so UUIDs, JSON and datetimes are stored exactly
as the ORM would store them, on PostgreSQL and SQLite alike (the package's ``tests/test_sql.py``).
"""

from __future__ import annotations  # Field[...] is generic in django-stubs only

import datetime
import decimal
import json
import uuid
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    BooleanField,
    Case,
    CharField,
    DateField,
    DecimalField,
    F,
    Field,
    IntegerField,
    JSONField,
    Model,
    Q,
    TextField,
    UUIDField,
    Value,
    When,
)
from django.db.models.fields.related import RelatedField
from django.db.models.functions import Cast

Statement = tuple[str, list[Any]]


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    """The field ``name`` of ``model``, one with a column (``get_field`` also answers reverse relations)."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or field.column is None:
        raise TypeError(f"{model.__name__}.{name} is not a field with a column")
    return field


def _column(field: Field[Any, Any]) -> str:
    if field.column is None:  # a field _field accepted always has one
        raise TypeError(f"{field} has no column")
    return field.column


@cache
def _insert_sql(model: type[Model], names: tuple[str, ...], conflict: tuple[str, ...], returning: str | None) -> str:
    fields = [_field(model, name) for name in names]
    sql = f"INSERT INTO {model._meta.db_table} ({', '.join(map(_column, fields))}) "
    sql += f"VALUES ({', '.join(['%s'] * len(names))})"
    return sql + _tail(model, conflict, returning)


def _tail(model: type[Model], conflict: tuple[str, ...], returning: str | None) -> str:
    tail = ""
    if conflict:
        tail += f" ON CONFLICT ({', '.join(_column(_field(model, n)) for n in conflict)}) DO NOTHING"
    if returning:
        tail += f" RETURNING {_column(_field(model, returning))}"
    return tail


def insert_statement(
    model: type[Model],
    values: dict[str, Any],
    *,
    ignore_conflict_on: tuple[str, ...] = (),
    returning: str | None = None,
    using: str = "default",
) -> Statement:
    """The statement that inserts one row (skipping a conflict on ``ignore_conflict_on``)."""
    connection = connections[using]
    names = tuple(values)
    params = [_field(model, name).get_db_prep_save(values[name], connection) for name in names]
    return _insert_sql(model, names, ignore_conflict_on, returning), params


def rows_statement(
    model: type[Model],
    rows: list[dict[str, Any]],
    *,
    ignore_conflict_on: tuple[str, ...] = (),
    returning: str | None = None,
    using: str = "default",
) -> Statement:
    """The statement that inserts many rows, all with the same keys.

    On PostgreSQL the rows travel as one JSON parameter (``INSERT ... SELECT ... FROM
    jsonb_array_elements(...)``; one array per column, ``unnest``, for a model with a field JSON
    cannot carry): the statement's text is the same whatever the number of rows, so PostgreSQL
    parses the same text every time; a ``VALUES`` list would be a new, long text for every batch.
    """
    connection = connections[using]
    names = tuple(rows[0])  # field names or attnames ("order_id")
    sql, fields, shape = _rows_sql(model, names, ignore_conflict_on, returning, using)
    values = ([row[n] for n in names] for row in rows)
    if shape == "json":
        return sql, [_json_rows(fields, values, connection)]
    if shape == "arrays":
        columns = zip(names, fields, strict=True)
        return sql, [[_array_element(f, row[n], connection) for row in rows] for n, f in columns]
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    params = [f.get_db_prep_save(value, connection) for row in values for f, value in zip(fields, row, strict=True)]
    return f"{sql} VALUES {', '.join([one] * len(rows))}" + _tail(model, ignore_conflict_on, returning), params


@cache
def _rows_sql(
    model: type[Model], names: tuple[str, ...], conflict: tuple[str, ...], returning: str | None, using: str
) -> tuple[str, tuple[Field[Any, Any], ...], str]:
    """``rows_statement``'s text for these keys, built once per process: its SQL, the fields in
    ``names``' order and how the rows travel ("json", "arrays", or "values", whose list and tail
    the caller appends, their length being the number of rows)."""
    connection = connections[using]
    fields = tuple(_field(model, name) for name in names)
    head = f"INSERT INTO {model._meta.db_table} ({', '.join(map(_column, fields))})"
    if connection.vendor != "postgresql":
        return head, fields, "values"
    if all(map(_travels_as_json, fields)):
        sql = f"{head} SELECT {', '.join(_json_values(fields, connection))} "
        sql += "FROM jsonb_array_elements(%s::jsonb) AS v(r)"
        return sql + _tail(model, conflict, returning), fields, "json"
    arrays = ", ".join(f"%s::{_array_type(f, connection)}[]" for f in fields)
    return f"{head} SELECT * FROM unnest({arrays})" + _tail(model, conflict, returning), fields, "arrays"


# --- Rows as one JSON parameter (PostgreSQL) -------------------------------------------------------
# psycopg quotes an array parameter element by element in Python; with client-side binding that
# was a fifth of a consumer's CPU. The rows travel instead as one JSON array of arrays, encoded by
# the json module's C encoder and taken apart by PostgreSQL (``jsonb_array_elements``). Only
# fields whose values JSON carries exactly take this way; any other model takes the arrays.
_JSON_FIELDS = (
    CharField,
    TextField,
    UUIDField,
    IntegerField,  # its Small, Big, Positive and Auto kinds too
    BooleanField,
    DecimalField,
    DateField,  # and DateTimeField
    JSONField,
)


def _travels_as_json(field: Field[Any, Any]) -> bool:
    if isinstance(field, JSONField):
        return field.encoder is None
    return isinstance(field, _JSON_FIELDS) or isinstance(field, RelatedField) and _travels_as_json(field.target_field)


def _json_values(fields: Sequence[Field[Any, Any]], connection: BaseDatabaseWrapper) -> list[str]:
    """Each field's value out of the row ``r`` (a JSON array), as its column's type. Text as text,
    not ``varchar(n)``: an explicit cast truncates silently, the insert's own cast refuses."""
    out = []
    for n, field in enumerate(fields):
        if isinstance(field, JSONField):
            out.append(f"v.r->{n}")
        elif (db_type := _array_type(field, connection)) == "text":
            out.append(f"v.r->>{n}")
        else:
            out.append(f"(v.r->>{n})::{db_type}")
    return out


def _json_scalar(value: object) -> str | int | float | None:
    """A column's value (as ``get_db_prep_save`` gives it) as JSON carries it: UUIDs and decimals
    as their text, dates and times in ISO 8601 (with their offset)."""
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, uuid.UUID | decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    raise TypeError(f"a {type(value).__name__} cannot travel as JSON")


def _json_rows(fields: Sequence[Field[Any, Any]], rows: Iterable[list[Any]], connection: BaseDatabaseWrapper) -> str:
    """``rows`` (lists of values in ``fields``' order) as one JSON text. A JSON field's value is
    nested as it is, so one that JSON cannot encode fails here, as the ORM's own insert would."""
    prepared = [
        [
            value if isinstance(f, JSONField) else _json_scalar(f.get_db_prep_save(value, connection))
            for f, value in zip(fields, row, strict=True)
        ]
        for row in rows
    ]
    return json.dumps(prepared, separators=(",", ":"))


def _array_type(field: Field[Any, Any], connection: BaseDatabaseWrapper) -> str:
    """The element type the arrays are cast to. Not ``varchar(n)``: an explicit cast to it
    truncates silently, whereas the insert's own (assignment) cast refuses a value too long."""
    db_type = field.db_type(connection)
    if db_type is None:  # only fields with no column have none
        raise TypeError(f"{field} has no database type")
    return "text" if db_type.startswith(("varchar", "char")) else db_type


def _array_element(field: Field[Any, Any], value: object, connection: BaseDatabaseWrapper) -> Any:
    """A value as an array element: JSON as its text (cast to ``jsonb`` by the statement)."""
    if isinstance(field, JSONField):
        return json.dumps(value, cls=field.encoder)
    return field.get_db_prep_save(value, connection)


def insert_row(
    model: type[Model], values: dict[str, Any], *, ignore_conflict_on: tuple[str, ...] = (), using: str = "default"
) -> bool:
    """Insert one row; with ``ignore_conflict_on``, False when that key already exists."""
    statement = insert_statement(model, values, ignore_conflict_on=ignore_conflict_on, using=using)
    return execute_together([statement], using=using) == 1


def insert_rows(
    model: type[Model],
    rows: list[dict[str, Any]],
    *,
    ignore_conflict_on: tuple[str, ...] = (),
    returning: str | None = None,
    using: str = "default",
) -> set[Any]:
    """Insert many rows in one statement; with ``returning``, that column's values of the rows
    actually inserted."""
    if not rows:
        return set()
    sql, params = rows_statement(model, rows, ignore_conflict_on=ignore_conflict_on, returning=returning, using=using)
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()} if returning else set()


def update_rows(
    model: type[Model],
    rows: list[dict[str, Any]],
    *,
    where: tuple[str, ...],
    bump: str,
    using: str = "default",
) -> int:
    """Update many rows in one statement, all with the same keys: each row's table row is the one
    whose ``where`` fields (its id and the version it was read with, say) equal the row's, and it
    is set to the row's other values, ``bump`` incremented by one. The number of rows updated.

    On PostgreSQL the rows travel as one JSON parameter, as ``rows_statement``'s do (``UPDATE ...
    FROM jsonb_array_elements(...)``: a constant text, built without the ORM); elsewhere, or for
    a model with a field JSON cannot carry, one ``CASE`` per field, as ``bulk_update`` builds it.
    """
    connection = connections[using]
    names = tuple(rows[0])
    fields = [_field(model, name) for name in names]
    if connection.vendor == "postgresql" and all(map(_travels_as_json, fields)):
        params = [_json_rows(fields, ([row[n] for n in names] for row in rows), connection)]
        with connection.cursor() as cursor:
            cursor.execute(_update_sql(model, names, where, bump, using), params)
            updated: int = cursor.rowcount
            return updated
    matches = [Q(**{n: row[n] for n in where}) for row in rows]
    condition = Q()
    for match in matches:
        condition |= match
    changes: dict[str, Any] = {}
    for n, f in zip(names, fields, strict=True):
        if n not in where:
            whens = [When(m, then=Value(row[n], output_field=f)) for m, row in zip(matches, rows, strict=True)]
            changes[n] = Case(*whens, output_field=f)
    if connection.features.requires_casted_case_in_updates:
        changes = {n: Cast(value, output_field=value.output_field) for n, value in changes.items()}
    return model._default_manager.using(using).filter(condition).update(**changes, **{bump: F(bump) + 1})


@cache
def _update_sql(model: type[Model], names: tuple[str, ...], where: tuple[str, ...], bump: str, using: str) -> str:
    """``update_rows``'s statement on PostgreSQL for these keys, built once per process."""
    fields = [_field(model, name) for name in names]
    values = dict(zip(names, _json_values(fields, connections[using]), strict=True))
    table = model._meta.db_table
    bumped = _column(_field(model, bump))
    changed = [f"{_column(f)} = {values[n]}" for n, f in zip(names, fields, strict=True) if n not in where]
    sql = f"UPDATE {table} SET {', '.join(changed)}, {bumped} = {table}.{bumped} + 1 "
    sql += "FROM jsonb_array_elements(%s::jsonb) AS v(r) WHERE "
    return sql + " AND ".join(f"{table}.{_column(_field(model, n))} = {values[n]}" for n in where)


def execute_together(statements: list[Statement], *, using: str = "default") -> int:
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
