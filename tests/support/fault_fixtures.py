"""Fixtures of the fault tests: processes connecting under a name the faults can find, a seed."""

import os
import random

import pytest

from faultlib.faults import with_application_name


@pytest.fixture
def process_env(process_env):
    """The suite's environment for processes, plus JSON logs and an ``application_name``.

    Cutting the database connections then reaches the processes a test started and nothing
    else: not the test's own connection, not another run's.
    """
    url = with_application_name(process_env["DATABASE_URL"])
    return {**process_env, "DATABASE_URL": url, "GATEWAY_DATABASE_URL": url, "LOG_FORMAT": "json"}


@pytest.fixture
def rng():
    """Random but repeatable: FAULT_SEED=<seed> replays a failed run's choices."""
    seed = int(os.environ.get("FAULT_SEED") or random.randrange(1_000_000))
    print(f"FAULT_SEED={seed}")
    return random.Random(seed)
