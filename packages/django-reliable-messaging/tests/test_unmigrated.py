"""A worker on a database its apps' migrations are missing from refuses to start, in one line
naming the command that prepares it (SETUP_COMMAND, ``migrate`` by default): otherwise it would
dead-letter every message on a missing table."""

from conftest import Manage


class OnAnotherDatabase(Manage):
    """``manage.py`` on an SQLite file of the test's folder, which nothing has migrated yet."""

    def env(self) -> dict[str, str]:
        return super().env() | {"DATABASE_URL": f"sqlite:///{self.cwd / 'fresh.sqlite3'}"}


def test_the_workers_refuse_an_unmigrated_database_until_it_is_migrated(workdir):
    manage = OnAnotherDatabase(workdir)
    for worker in (["run_outbox_relay", "--once"], ["run_consumers", "--once"]):
        refused = manage(*worker, ok=False)
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines()[-1].startswith("CommandError: the database lacks migrations of ")
        assert refused.stderr.strip().endswith("run `python manage.py migrate` for this deployment first")

    manage("migrate", "-v", "0")
    manage("run_outbox_relay", "--once")
    manage("run_consumers", "--once")
