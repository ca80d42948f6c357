"""Payments' side of the card gateway: an HTTP client of ``GATEWAY_URL`` (its API: docs/payments-gateway.md;
the fake gateway of development and tests, fake_gateway/, serves it), answering in payments' terms
(payments/gateway.py: results and exceptions).

Every answer is hostile until checked. An answer is believed only when its status is one the API
has, its body a JSON object of at most ``MAX_ANSWER_BYTES`` (no encoding it was not asked for), and
its operation the one asked about: the key, the order, the amount and the currency sent. A redirect
is never followed (it would carry the card's token elsewhere). Anything else is an unknown outcome
(``OutcomeUnknown``: looked up by key later, as after a crash), never a decline or a success; a
``pending`` operation is unknown too. ``GATEWAY_TIMEOUT`` bounds a whole call, from the connect to
the answer's last byte: a read timeout alone is per read, and an answer that trickles a byte at a
time would hold the call for ever.

One ``requests`` session per process: a pool of at most ``GATEWAY_CONCURRENCY`` kept-alive
connections. Only what cannot have reached the gateway is retried here (a refused or timed-out
connect), and a look-up (a GET); a charge or refund whose answer is lost is retried by the worker
with the same idempotency key, which the gateway answers from its first result.

``GATEWAY_URL=inprocess:`` is the unit and integration tiers' stand-in, with no HTTP: the object
``GATEWAY_IN_PROCESS`` names by its dotted path (config/settings.py names the fake gateway's where it is
installed), with this client's methods, results and exceptions.
"""

import email.utils
import json
import re
import socket
import threading
import time
import urllib.parse
from decimal import Decimal

import requests
import urllib3
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util.retry import Retry

from payments.conf import setting
from payments.gateway import (
    ChargeNotRefundable,
    GatewayError,
    GatewayResult,
    GatewayTimeout,
    GatewayUnavailable,
    IdempotencyKeyReused,
    LedgerEntry,
    OutcomeUnknown,
    UnbelievableAnswer,
)

IN_PROCESS = "inprocess:"
# A connect either happens fast on a healthy network or not at all (three tries fit in the call's time).
CONNECT_TIMEOUT = 3.0
# A charge, a refund or an error is a few hundred bytes: anything much bigger is not an answer.
MAX_ANSWER_BYTES = 16 * 1024
# The ledger (GET /v1/ledger, every operation: what the invariants read) is a few hundred bytes an operation.
MAX_LEDGER_BYTES = 256 * 1024 * 1024
# The gateway's Retry-After is honoured up to this long: a hostile one would park a call for ever.
MAX_RETRY_AFTER = 300.0
# What an id and a decline code may be: what payments' columns (100 characters) and events hold.
OPERATION_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")
DECLINE_CODE = re.compile(r"[a-z0-9_]{1,64}")


def _minor(amount: Decimal) -> int:
    return int((amount * 100).to_integral_value())


# --- a deadline for the whole call ----------------------------------------------------------------
_this_thread = threading.local()


def _shut(sock) -> None:
    try:  # the plain socket's shutdown, an SSL socket's too: any read in progress ends at once
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Deadline:
    """One call's time: when it passes, the call's socket is shut down, whatever the call is waiting for."""

    def __init__(self, seconds: float):
        self.passed = False
        self._socket = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "_Deadline":
        _this_thread.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *_) -> None:
        self._timer.cancel()
        _this_thread.deadline = None
        with self._lock:
            self._socket = None

    def watch(self, sock) -> None:
        with self._lock:
            self._socket = sock
            if self.passed:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.passed = True
            if self._socket is not None:
                _shut(self._socket)


class _Watched:
    """A connection whose socket the current call's deadline watches while its answer comes."""

    def getresponse(self):
        if (deadline := getattr(_this_thread, "deadline", None)) is not None:
            deadline.watch(self.sock)
        return super().getresponse()


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = type("WatchedHTTPConnection", (_Watched, HTTPConnection), {})


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = type("WatchedHTTPSConnection", (_Watched, HTTPSConnection), {})


class _Adapter(HTTPAdapter):
    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}


# --- reading an answer ----------------------------------------------------------------------------
def _never_reached(exc: requests.ConnectionError) -> bool:
    """The request never left: nothing can have happened on the gateway's side."""
    reason = getattr(exc.args[0] if exc.args else None, "reason", None)
    return isinstance(exc, requests.ConnectTimeout) or isinstance(reason, NewConnectionError | ConnectTimeoutError)


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (seconds or an HTTP date), bounded; None if absent or unreadable."""
    if not value:
        return None
    if value.strip().isdigit():
        seconds = float(value.strip())
    else:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError):
            return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number")


def _body(response: requests.Response, limit: int = MAX_ANSWER_BYTES) -> dict:
    """The answer's JSON object, read whole (within the call's deadline) and at most ``limit`` bytes."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":
        raise UnbelievableAnswer(f"an answer encoded {encoding[:40]!r}, which was not asked for")
    kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise UnbelievableAnswer(f"an answer ({response.status_code}) of type {kind[:60]!r}, not JSON")
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        raise UnbelievableAnswer(f"an answer of {declared[:20]} bytes (at most {limit})")
    data = response.raw.read(limit + 1, decode_content=False)
    if len(data) > limit:
        raise UnbelievableAnswer(f"an answer of more than {limit} bytes")
    try:
        body = json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise UnbelievableAnswer(f"an answer ({response.status_code}) that is not JSON: {data[:80]!r}") from None
    if not isinstance(body, dict):
        raise UnbelievableAnswer(f"an answer ({response.status_code}) that is not a JSON object")
    return body


def _operation(obj, *, kind: str, key: str, order_id: str, amount: Decimal | None, currency: str | None):
    """The charge or refund an answer describes, if it is the one asked about; else the outcome is unknown."""
    if not isinstance(obj, dict):
        raise UnbelievableAnswer(f"an answer with no {kind} in it")
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    minor, code, status = obj.get("amount"), obj.get("currency"), obj.get("status")
    wrong = [
        name
        for name, ok in (
            ("object", obj.get("object") == kind),
            ("idempotency_key", obj.get("idempotency_key") == key),
            ("metadata.order_id", metadata.get("order_id") == order_id),
            ("id", isinstance(obj.get("id"), str) and OPERATION_ID.fullmatch(obj["id"])),
            ("amount", type(minor) is int and minor > 0 and (amount is None or minor == _minor(amount))),
            ("currency", isinstance(code, str) and len(code) == 3 and code.lower() == (currency or code).lower()),
        )
        if not ok
    ]
    if wrong:
        raise UnbelievableAnswer(f"an answer about another {kind} than {key} (its {', '.join(wrong)})")
    if status == "pending":
        raise OutcomeUnknown(f"the {kind} {key} is pending")
    decline = obj.get("failure_code")
    if status == "failed" and not (isinstance(decline, str) and DECLINE_CODE.fullmatch(decline)):
        raise UnbelievableAnswer(f"a failed {kind} with no readable failure code")
    if status not in ("succeeded", "failed"):
        raise UnbelievableAnswer(f"a {kind} whose status is {str(status)[:40]!r}")
    return GatewayResult(
        succeeded=status == "succeeded",
        operation_id=obj["id"],
        amount=(Decimal(minor) / 100).quantize(Decimal("0.01")),
        currency=code.upper(),
        decline_code=decline if status == "failed" else "",
    )


def _error(body: dict) -> dict:
    return body["error"] if isinstance(body.get("error"), dict) else {}


class HttpGateway:
    def __init__(self, base_url: str, *, timeout: float, pool_size: int):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.connect_timeout = min(CONNECT_TIMEOUT, timeout / 3)
        # Connect errors are retried for every method (the request never left); a 503 only for GET
        # (a look-up changes nothing). A POST is never repeated here; a redirect never followed.
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
        adapter = _Adapter(pool_connections=1, pool_maxsize=pool_size, pool_block=True, max_retries=retry)
        self.session.mount(self.base_url + "/", adapter)

    def _call(
        self, method: str, path: str, *, key: str = "", body: dict | None = None, limit: int = MAX_ANSWER_BYTES
    ) -> tuple[int, dict]:
        """The answer's status and JSON object, whole within GATEWAY_TIMEOUT. A 5xx, a 429, a redirect
        or anything unreadable raises: unavailable (nothing happened) or an unknown outcome."""
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        if key:
            headers["Idempotency-Key"] = key
        with _Deadline(self.timeout) as deadline:
            try:
                response = self.session.request(
                    method,
                    self.base_url + path,
                    json=body,
                    headers=headers,
                    timeout=(self.connect_timeout, self.timeout),
                    allow_redirects=False,
                    stream=True,
                )
                try:
                    return response.status_code, self._answer(response, limit)
                except UnbelievableAnswer:
                    if deadline.passed:  # cut short: what came was not the answer
                        raise self._lost(deadline, None) from None
                    raise
                finally:
                    response.close()
            except requests.ConnectionError as exc:
                if _never_reached(exc) and not deadline.passed:
                    raise GatewayUnavailable(f"cannot reach the gateway at {self.base_url}: {exc}") from exc
                raise self._lost(deadline, exc) from exc
            except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
                raise self._lost(deadline, exc) from exc

    def _lost(self, deadline: _Deadline, exc: Exception | None) -> OutcomeUnknown:
        if deadline.passed or isinstance(exc, requests.Timeout | urllib3.exceptions.TimeoutError):
            return GatewayTimeout(f"no answer within GATEWAY_TIMEOUT ({self.timeout:g} s)")
        return GatewayTimeout(f"the gateway's answer was lost: {type(exc).__name__}")

    @staticmethod
    def _answer(response: requests.Response, limit: int = MAX_ANSWER_BYTES) -> dict:
        status = response.status_code
        if status in (429, 503):
            retry_after = _retry_after(response.headers.get("Retry-After"))
            raise GatewayUnavailable(f"the gateway is unavailable ({status})", retry_after=retry_after)
        if status >= 500:  # it may or may not have happened: as a lost answer
            raise GatewayTimeout(f"the gateway failed ({status})")
        if status not in (200, 400, 402, 404, 409):
            raise UnbelievableAnswer(f"an answer with status {status}" + (" (never followed)" if status < 400 else ""))
        return _body(response, limit)

    @staticmethod
    def _refused(status: int, body: dict) -> GatewayError:
        """A 4xx the API has: the call was refused, nothing happened."""
        err = _error(body)
        if err.get("type") == "idempotency_error":
            return IdempotencyKeyReused(repr(str(err.get("message", ""))[:200]))
        if err.get("code") == "charge_not_refundable":
            return ChargeNotRefundable(repr(str(err.get("message", ""))[:200]))
        return GatewayError(f"the gateway refused the call ({status}): {str(err.get('code', ''))[:60]!r}")

    def charge(
        self, *, idempotency_key: str, order_id: str, amount: Decimal, currency: str, token: str
    ) -> GatewayResult:
        body = {
            "amount": _minor(amount),
            "currency": currency.lower(),
            "source": token,
            "metadata": {"order_id": order_id},
        }
        status, answer = self._call("POST", "/v1/charges", key=idempotency_key, body=body)
        expected = {
            "kind": "charge",
            "key": idempotency_key,
            "order_id": order_id,
            "amount": amount,
            "currency": currency,
        }
        if status == 200:
            return _operation(answer, **expected)
        if status == 402:  # declined: the charge object is in the error
            declined = _operation(_error(answer).get("charge"), **expected)
            if declined.succeeded:
                raise UnbelievableAnswer(f"a decline whose charge {idempotency_key} succeeded")
            return declined
        raise self._refused(status, answer)

    def refund(
        self,
        *,
        idempotency_key: str,
        charge_key: str,
        amount: Decimal,
        order_id: str,
        currency: str | None = None,
        charge_id: str = "",
    ) -> GatewayResult:
        if not charge_id:  # the gateway names a charge by its id: find it by its key
            charge = self.find(charge_key, kind="charge", order_id=order_id, amount=amount, currency=currency)
            if charge is None:
                raise ChargeNotRefundable(f"no charge {charge_key}")
            charge_id = charge.operation_id
        body = {"charge": charge_id, "amount": _minor(amount)}
        status, answer = self._call("POST", "/v1/refunds", key=idempotency_key, body=body)
        if status == 200:
            return _operation(
                answer, kind="refund", key=idempotency_key, order_id=order_id, amount=amount, currency=currency
            )
        raise self._refused(status, answer)

    def find(
        self,
        idempotency_key: str,
        *,
        kind: str,
        order_id: str,
        amount: Decimal | None = None,
        currency: str | None = None,
    ) -> GatewayResult | None:
        """Ask what became of an operation whose outcome is unknown (None: the gateway holds nothing under the key)."""
        status, answer = self._call("GET", "/v1/operations/" + urllib.parse.quote(idempotency_key, safe=""))
        if status == 200:
            return _operation(
                answer, kind=kind, key=idempotency_key, order_id=order_id, amount=amount, currency=currency
            )
        if status == 404 and _error(answer).get("code") == "resource_missing":
            return None
        raise self._refused(status, answer)

    def ledger(self, *, order_id: str | None = None) -> list[LedgerEntry]:
        """The money the gateway moved (``GET /v1/ledger``): successful charges and refunds, oldest first."""
        query = "?" + urllib.parse.urlencode({"order_id": order_id}) if order_id else ""
        status, answer = self._call("GET", "/v1/ledger" + query, limit=MAX_LEDGER_BYTES)
        if status != 200:
            raise self._refused(status, answer)
        if not isinstance(answer.get("data"), list):
            raise UnbelievableAnswer("a ledger with no data")
        return [_ledger_entry(obj) for obj in answer["data"]]


def _ledger_entry(obj) -> LedgerEntry:
    """One operation of the ledger, if it reads as money moved for an order."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise UnbelievableAnswer("a ledger entry that is not an object with metadata")
    kind, order_id, minor, code = (
        obj.get("object"),
        obj["metadata"].get("order_id"),
        obj.get("amount"),
        obj.get("currency"),
    )
    if kind not in ("charge", "refund") or not isinstance(order_id, str):
        raise UnbelievableAnswer("a ledger entry that is not a charge or refund of an order")
    if type(minor) is not int or minor <= 0 or not (isinstance(code, str) and len(code) == 3):
        raise UnbelievableAnswer("a ledger entry with no readable amount")
    return LedgerEntry(
        order_id=order_id,
        kind=kind,
        amount=(Decimal(minor) / 100).quantize(Decimal("0.01")),
        currency=code.upper(),
        idempotency_key=str(obj.get("idempotency_key") or ""),
    )


_lock = threading.Lock()
_clients: dict[tuple, HttpGateway] = {}


def current():
    """The gateway payments talks to under the settings now: one HTTP client (and pool) per
    process and URL, or the in-process stand-in."""
    url = setting("GATEWAY_URL")
    if url == IN_PROCESS:
        return _in_process()
    config = (url, setting("GATEWAY_TIMEOUT"), setting("GATEWAY_CONCURRENCY"))
    with _lock:
        if config not in _clients:
            _clients[config] = HttpGateway(url, timeout=config[1], pool_size=config[2])
        return _clients[config]


def _in_process():
    path = getattr(settings, "GATEWAY_IN_PROCESS", "")
    if not path:
        raise ImproperlyConfigured(
            "GATEWAY_URL=inprocess: needs GATEWAY_IN_PROCESS, the dotted path of an in-process gateway "
            "(config/settings.py sets it where the fake gateway is installed)"
        )
    return import_string(path)


class _Current:
    """``gateway.charge(...)`` on whichever gateway ``current()`` names at the time of the call."""

    def __getattr__(self, name):
        return getattr(current(), name)


gateway = _Current()
