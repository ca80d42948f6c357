"""PostgreSQL only: wake the relay on new outbox rows, and vacuum the outbox often.

- A statement-level trigger sends ``NOTIFY messaging_outbox`` (empty payload). PostgreSQL
  folds identical notifications of one transaction into one, so a transaction that writes
  several events notifies once; a NOTIFY takes a database-wide lock at commit, and one per
  transaction is the least the relay's wake-up can cost.
- Every published row leaves a dead entry at the head of ``outbox_pending_idx``, exactly
  where the claim starts reading. Vacuuming after a fixed number of dead rows (not a share
  of a table that keeps millions of published rows), without cost-based sleeps, keeps that
  head short.

On SQLite both are skipped: the relay polls there.
"""

from django.db import migrations

FORWARD = [
    """
    CREATE OR REPLACE FUNCTION messaging_outbox_notify() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('messaging_outbox', '');
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER messaging_outbox_notify
    AFTER INSERT ON messaging_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION messaging_outbox_notify()
    """,
    """
    ALTER TABLE messaging_outbox SET (
        autovacuum_vacuum_scale_factor = 0,
        autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0,
        autovacuum_vacuum_insert_threshold = 20000,
        autovacuum_analyze_scale_factor = 0,
        autovacuum_analyze_threshold = 20000,
        autovacuum_vacuum_cost_delay = 0
    )
    """,
]

BACKWARD = [
    """
    ALTER TABLE messaging_outbox RESET (
        autovacuum_vacuum_scale_factor,
        autovacuum_vacuum_threshold,
        autovacuum_vacuum_insert_scale_factor,
        autovacuum_vacuum_insert_threshold,
        autovacuum_analyze_scale_factor,
        autovacuum_analyze_threshold,
        autovacuum_vacuum_cost_delay
    )
    """,
    "DROP TRIGGER IF EXISTS messaging_outbox_notify ON messaging_outbox",
    "DROP FUNCTION IF EXISTS messaging_outbox_notify()",
]


def _run(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("messaging", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(_run(FORWARD), _run(BACKWARD), elidable=False),
    ]
