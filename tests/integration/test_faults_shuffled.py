"""Property: a saga's messages delivered in any order, any of them again, with a cancellation and
the deadline at any moment, always end consistent (hypothesis chooses every step)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultlib.fixtures import ALL_DATABASES
from faultlib.simulation import shuffled_sagas

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_duplicated_and_shuffled_deliveries_of_sagas_keep_every_invariant(data):
    # given one to three orders competing for a fresh SKU of scarce stock
    # when hypothesis delivers their events in any order, some twice, cancelling one and firing
    # the deadline at any step
    # then every order ends terminal, stock and money add up, and nothing had two effects
    shuffled_sagas(data)
