"""Payments' side of the card gateway: an HTTP client of ``GATEWAY_URL`` (payments/gateway_server.py
is the fake one), with the in-process stand-in's interface and exceptions (payments/gateway.py).

One ``requests`` session per process: a pool of at most ``GATEWAY_CONCURRENCY`` kept-alive
connections; each call waits at most ``GATEWAY_TIMEOUT`` for its answer. Only what cannot have
reached the gateway is retried here (a refused or timed-out connect), and a look-up (a GET); a
charge or refund whose answer is lost is a ``GatewayTimeout``, retried by the message's redelivery
with the same idempotency key, which the gateway answers from its first result.

``GATEWAY_URL=inprocess:`` is the unit and integration tiers' stand-in: ``payments.gateway.gateway``.
"""

import threading
import urllib.parse
from decimal import Decimal

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util.retry import Retry

from payments import gateway as stand_in
from payments.gateway import (
    ChargeNotRefundable,
    GatewayError,
    GatewayResult,
    GatewayTimeout,
    GatewayUnavailable,
    IdempotencyKeyReused,
)

IN_PROCESS = "inprocess:"
# A connect either happens fast on a healthy network or not at all; the answer gets GATEWAY_TIMEOUT.
CONNECT_TIMEOUT = 3.0


def _result(body: dict) -> GatewayResult:
    return GatewayResult(
        succeeded=body["status"] == "succeeded",
        operation_id=body["id"],
        amount=(Decimal(body["amount"]) / 100).quantize(Decimal("0.01")),
        currency=body["currency"].upper(),
        decline_code=body.get("failure_code") or "",
    )


def _never_reached(exc: requests.ConnectionError) -> bool:
    """The request never left: nothing can have happened on the gateway's side."""
    reason = getattr(exc.args[0] if exc.args else None, "reason", None)
    return isinstance(exc, requests.ConnectTimeout) or isinstance(reason, NewConnectionError | ConnectTimeoutError)


class HttpGateway:
    def __init__(self, base_url: str, *, timeout: float, pool_size: int):
        self.base_url = base_url.rstrip("/")
        self.timeout = (min(CONNECT_TIMEOUT, timeout), timeout)
        # Connect errors are retried for every method (the request never left); read errors and a
        # 503 only for GET (a look-up changes nothing). A POST is never repeated here.
        retry = Retry(
            total=3,
            connect=2,
            read=0,
            status=1,
            other=0,
            redirect=0,
            status_forcelist={503},
            allowed_methods=frozenset({"GET"}),
            backoff_factor=0.05,
            raise_on_status=False,
            respect_retry_after_header=False,
        )
        self.session = requests.Session()
        # pool_block: more callers than connections wait for one instead of opening more.
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=pool_size, pool_block=True, max_retries=retry)
        self.session.mount(self.base_url + "/", adapter)

    def _call(self, method: str, path: str, *, key: str = "", body: dict | None = None) -> requests.Response:
        headers = {"Idempotency-Key": key} if key else {}
        try:
            return self.session.request(method, self.base_url + path, json=body, headers=headers, timeout=self.timeout)
        except requests.ConnectionError as exc:
            if _never_reached(exc):
                raise GatewayUnavailable(f"cannot reach the gateway at {self.base_url}: {exc}") from exc
            raise GatewayTimeout(f"the gateway's answer was lost: {exc}") from exc
        except requests.Timeout as exc:
            raise GatewayTimeout(f"no answer within GATEWAY_TIMEOUT ({self.timeout[1]:g} s)") from exc

    @staticmethod
    def _raise_for(response: requests.Response) -> None:
        if response.status_code == 503:
            raise GatewayUnavailable("the gateway is unavailable")
        if response.status_code >= 500:  # it may or may not have happened: as a lost answer
            raise GatewayTimeout(f"the gateway failed ({response.status_code}): {response.text[:200]}")
        err = response.json().get("error", {})
        if err.get("type") == "idempotency_error":
            raise IdempotencyKeyReused(err.get("message", ""))
        if err.get("code") == "charge_not_refundable":
            raise ChargeNotRefundable(err.get("message", ""))
        raise GatewayError(f"the gateway refused the call ({response.status_code}): {err}")

    def charge(
        self, *, idempotency_key: str, order_id: str, amount: Decimal, currency: str, token: str
    ) -> GatewayResult:
        body = {
            "amount": int((amount * 100).to_integral_value()),
            "currency": currency.lower(),
            "source": token,
            "metadata": {"order_id": order_id},
        }
        response = self._call("POST", "/v1/charges", key=idempotency_key, body=body)
        if response.status_code == 200:
            return _result(response.json())
        if response.status_code == 402:  # declined: the charge object is in the error
            return _result(response.json()["error"]["charge"])
        self._raise_for(response)

    def refund(self, *, idempotency_key: str, charge_key: str, amount: Decimal, charge_id: str = "") -> GatewayResult:
        if not charge_id:  # the gateway names a charge by its id: find it by its key
            charge = self.find(charge_key)
            if charge is None:
                raise ChargeNotRefundable(f"no charge {charge_key}")
            charge_id = charge.operation_id
        body = {"charge": charge_id, "amount": int((amount * 100).to_integral_value())}
        response = self._call("POST", "/v1/refunds", key=idempotency_key, body=body)
        if response.status_code == 200:
            return _result(response.json())
        self._raise_for(response)

    def find(self, idempotency_key: str) -> GatewayResult | None:
        """Ask what became of an operation whose outcome is unknown."""
        response = self._call("GET", "/v1/operations/" + urllib.parse.quote(idempotency_key, safe=""))
        if response.status_code == 200:
            return _result(response.json())
        if response.status_code == 404:
            return None
        self._raise_for(response)


_lock = threading.Lock()
_clients: dict[tuple, HttpGateway] = {}


def current():
    """The gateway payments talks to under the settings now: one HTTP client (and pool) per
    process and URL, or the in-process stand-in."""
    url = settings.GATEWAY_URL
    if url == IN_PROCESS:
        return stand_in.gateway
    config = (url, settings.GATEWAY_TIMEOUT, settings.GATEWAY_CONCURRENCY)
    with _lock:
        if config not in _clients:
            _clients[config] = HttpGateway(url, timeout=config[1], pool_size=config[2])
        return _clients[config]


class _Current:
    """``gateway.charge(...)`` on whichever gateway ``current()`` names at the time of the call."""

    def __getattr__(self, name):
        return getattr(current(), name)


gateway = _Current()
