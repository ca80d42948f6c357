"""The fake card gateway: a development service of its own, not a context (no declaration, no events).

Payments knows only the gateway's HTTP API (payments/gateway_client.py) and never imports this
package. It has its own ledger (``models.GatewayOperation`` on the ``gateway`` database alias), its
own settings' defaults (``conf.py``), its HTTP service (``server.py``, ``manage.py run_fake_gateway``,
the Procfile's ``gateway``), ``manage.py gateway_ledger``, and, for the unit and integration tiers,
a stand-in of payments' client in the caller's own process (``in_process.py``). The monolith installs
it beside payments in development and the tests only (``FAKE_GATEWAY``, config/settings.py).
"""
