#!/usr/bin/env python3
"""A guided tour of every saga path, against whatever ``make run`` is running.

Places orders through the HTTP API (confirmed, declined, out of stock with a refund, a
duplicate request replayed by its Idempotency-Key, a cancellation), has the relay deliver one
message a second time through the broker, dispatches the confirmed order's shipment as the admin's
action does, waits with a progress line until every saga has finished,
and prints each order's timeline: which context published what, when, and who handled it.

Run it with the environment of ``make run`` (it reads the same database and broker for the
timelines, the gateway's ledger and the second delivery): ``make demo``, or
``DEBUG=1 .venv/bin/python scripts/demo.py --base-url http://127.0.0.1:8000``. Against
``make run-split``: ``make demo SPLIT=1`` (the orders deployment's environment; the ledger is
then read by the payments deployment's own ``gateway_ledger``).
"""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DEBUG", "1")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import DatabaseError, transaction  # noqa: E402
from kombu import Queue  # noqa: E402
from reliable_messaging.api import publish_again  # noqa: E402
from reliable_messaging.hosting import broker_connection, queue_name  # noqa: E402
from reliable_messaging.models import InboxMessage, OutboxMessage  # noqa: E402
from reliable_messaging.operator import timeline_for, timeline_waiting  # noqa: E402

from operations.swimlane import saga_swimlane  # noqa: E402

if "payments" in settings.CONTEXTS:
    from fake_gateway.in_process import gateway
else:  # a split: the ledger is in the payments deployment, asked through its own command
    gateway = None

SPINNER = "|/-\\"
WAIT_SECONDS = 120
PICTURES = settings.VAR_DIR / "demo"  # each path's swimlane, as SVG files a browser opens


# --- HTTP ---------------------------------------------------------------------------------
@dataclass
class Reply:
    status: int
    body: dict | list
    headers: dict = field(default_factory=dict)


class Api:
    def __init__(self, base_url: str):
        self.base = base_url.rstrip("/")

    def call(self, method: str, path: str, body=None, headers=None) -> Reply:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json", **(headers or {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return Reply(response.status, json.loads(response.read() or b"null"), dict(response.headers))
        except urllib.error.HTTPError as error:
            return Reply(error.code, json.loads(error.read() or b"null"), dict(error.headers))

    def checkout(self, items, token: str, key: str | None = None, customer: str = "demo") -> Reply:
        body = {"customer_id": customer, "items": items, "payment_token": token}
        return self.call("POST", "/api/checkout/", body, {"Idempotency-Key": key or str(uuid.uuid4())})


def wait_for_server(api: Api) -> None:
    deadline = time.monotonic() + 15
    while True:
        try:
            if api.call("GET", "/healthz").status == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            sys.exit(
                f"Nothing answers at {api.base}/healthz.\n"
                "Start the shop first, in another terminal: make run\n"
                "(then run make demo with the same DATABASE_URL / BROKER_URL, if you set them)."
            )
        time.sleep(0.5)


# --- the paths ----------------------------------------------------------------------------
@dataclass
class Story:
    title: str
    story: str
    order_id: str
    notes: list[str] = field(default_factory=list)
    picture: Path | None = None


def slug(title: str) -> str:
    return "-".join(title.lower().split())


def place(api: Api, title: str, story: str, items, token: str) -> Story:
    reply = api.checkout(items, token)
    if reply.status != 201:
        sys.exit(f"checkout for {title!r} answered {reply.status}: {reply.body}")
    return Story(title, story, reply.body["id"])


def products(api: Api) -> tuple[dict, dict]:
    listed = api.call("GET", "/api/products/").body
    if not listed:
        sys.exit("The catalogue is empty: make run seeds it (python manage.py seed_catalog).")
    plenty = max(listed, key=lambda p: p["available"])
    scarce = min(listed, key=lambda p: p["available"])
    return plenty, scarce


def duplicate_request(api: Api, sku: str) -> Story:
    key = f"demo-{uuid.uuid4()}"
    items = [{"sku": sku, "quantity": 1}]
    first = api.checkout(items, "tok_visa", key=key)
    second = api.checkout(items, "tok_visa", key=key)
    path = Story(
        "Duplicate request",
        "The client sends the same checkout twice with one Idempotency-Key (a retry after a timeout).",
        first.body["id"],
    )
    path.notes.append(f"1st POST: {first.status}, order {first.body['id']}")
    replayed = second.headers.get("Idempotent-Replayed", "-")
    path.notes.append(f"2nd POST: {second.status}, order {second.body['id']}, Idempotent-Replayed: {replayed}")
    path.notes.append(
        "One order, one charge: the second answer is the stored first one."
        if second.body["id"] == first.body["id"]
        else "!! the second request made another order"
    )
    return path


def queue_depth(connection, consumer: str) -> int:
    return Queue(queue_name(consumer))(connection.default_channel).queue_declare(passive=True).message_count


def deliver_again(order_id: str) -> tuple[str, float]:
    """Have the relay publish the order's ``orders.order.created`` once more, exactly as it did
    the first time (``publish_again``: same message id, same headers, through the same exchange),
    as a relay that crashed between the broker's confirm and its commit does. Waits until the relay
    has sent it and the queues it reaches are empty again; returns the message id and when it was
    sent."""
    sent_at = time.time()
    with transaction.atomic():
        publish_again(event_type="orders.order.created", correlation_id=order_id)
    row = OutboxMessage.objects.get(correlation_id=order_id, event_type="orders.order.created")
    deadline = time.monotonic() + 30
    while row.published_at is None and time.monotonic() < deadline:
        time.sleep(0.2)
        row.refresh_from_db(fields=["published_at"])
    with broker_connection() as connection:
        connection.connect()
        while any(queue_depth(connection, c) for c in ("payments", "events")) and time.monotonic() < deadline:
            time.sleep(0.2)
    time.sleep(1.0)  # the message in hand is settled a moment after it leaves the queue
    return str(row.event_id), sent_at


def dispatch(path: Story) -> None:
    """Dispatch the order's shipment with the service behind the admin's action, where this
    deployment hosts shipping."""
    if "shipping" not in settings.CONTEXTS:
        return
    from shipping.models import Shipment
    from shipping.services import shipments_dispatch

    shipments = list(Shipment.objects.filter(order_id=path.order_id).values_list("pk", flat=True))
    result = shipments_dispatch(shipment_ids=shipments)
    path.notes.append(
        f"admin action 'Dispatch the selected shipments': {len(result.dispatched)} dispatched, "
        f"{len(result.refused)} refused"
    )


def ledger(order_id: str) -> list[str]:
    """``charge 12.50``, ``refund 12.50``: the gateway's ledger of one order, read where it is."""
    if gateway is not None:
        return [f"{op.kind} {op.amount}" for op in gateway.ledger(order_id=order_id)]
    url = settings.DEPLOYMENT_DATABASE_URLS.get("payments")
    if url is None:
        sys.exit("The ledger is in the payments deployment: set PAYMENTS_DATABASE_URL (make demo SPLIT=1 does).")
    env = {**os.environ, "CONTEXTS": "payments", "DATABASE_URL": url}
    argv = [sys.executable, "manage.py", "gateway_ledger", "--order", order_id]
    done = subprocess.run(argv, cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=60)
    if done.returncode:
        sys.exit(f"The payments deployment's gateway_ledger failed:\n{done.stderr.strip()}")
    return [f"{op['kind']} {op['amount']}" for op in map(json.loads, done.stdout.splitlines())]


def same_database(order_id: str) -> None:
    """The timelines and the second delivery read this process's database: it must be the shop's."""
    try:
        if "orders" in settings.CONTEXTS and OutboxMessage.objects.filter(correlation_id=order_id).exists():
            return
    except DatabaseError:  # not even migrated: surely not the shop's database
        pass
    sys.exit(
        f"The shop answering at this URL keeps its orders in another database than this demo reads "
        f"(CONTEXTS={','.join(settings.CONTEXTS)}, DATABASE_URL={settings.DATABASES['default']['NAME']}).\n"
        "Run the demo with the shop's environment: `make demo` against `make run`, `make demo SPLIT=1` against "
        "`make run-split` (with the DATABASE_URL / BROKER_URL you gave it, if any)."
    )


# --- waiting, with a progress line --------------------------------------------------------
def saga_state(api: Api, order_id: str) -> tuple[str, bool]:
    """The order's status, and whether its saga is done: decided, and nothing waiting."""
    status = api.call("GET", f"/api/orders/{order_id}/").body["status"]
    entries = timeline_for(order_id, detailed=True)
    # As the admin does: once decided, a context hosted elsewhere that had nothing to say is no wait.
    return status, status != "PENDING" and not timeline_waiting(entries, expect_answers=status == "PENDING")


def wait_all(api: Api, paths: list[Story], label: str) -> None:
    tty = sys.stdout.isatty()
    started = time.monotonic()
    tick = 0
    while True:
        states = {p.order_id: saga_state(api, p.order_id) for p in paths}
        done = sum(finished for _, finished in states.values())
        statuses = ", ".join(f"{p.title.split()[0].lower()}: {states[p.order_id][0]}" for p in paths)
        elapsed = time.monotonic() - started
        line = f"  {SPINNER[tick % 4]} {label}: {done}/{len(paths)} sagas finished ({elapsed:4.1f}s)  {statuses}"
        if tty:
            print("\r" + line.ljust(150)[:150], end="", flush=True)
        elif tick % 10 == 0 or done == len(paths):
            print(line, flush=True)
        if done == len(paths):
            if tty:
                print()
            return
        if elapsed > WAIT_SECONDS:
            print(f"\n  !! still waiting after {WAIT_SECONDS}s: open the order pages in the admin to see where.")
            return
        tick += 1
        time.sleep(0.25)


# --- printing -----------------------------------------------------------------------------
def seconds_after(moment, origin) -> str:
    return f"+{(moment - origin).total_seconds():.3f}s" if moment else "-"


def print_timeline(api: Api, path: Story, admin_url: str) -> None:
    order = api.call("GET", f"/api/orders/{path.order_id}/").body
    reason = f" ({order['failure_reason']})" if order["failure_reason"] else ""
    print(f"\n== {path.title} ".ljust(100, "="))
    print(f"   {path.story}")
    print(f"   order {order['id']}: {order['status']}{reason}, total {order['total']} {order['currency']}")
    for note in path.notes:
        print(f"   - {note}")
    entries = timeline_for(path.order_id, detailed=True)
    if not entries:
        return
    origin = entries[0].occurred_at
    print(f"   {'at':>9}  {'context':<10} {'event':<36} {'message id':<36}  {'published':>9}  handled by")
    for entry in entries:
        handled = ", ".join(f"{h.consumer} {seconds_after(h.handled_at, origin)}" for h in entry.handled_by)
        print(
            f"   {seconds_after(entry.occurred_at, origin):>9}  {entry.source:<10} {entry.event_type:<36} "
            f"{entry.message_id:<36}  {seconds_after(entry.published_at, origin):>9}  {handled or '-'}"
        )
    money = ledger(path.order_id)
    waiting = timeline_waiting(entries, expect_answers=False)  # a silent context hosted elsewhere is no wait
    picture = PICTURES / f"{len(list(PICTURES.glob('*.svg'))) + 1:02d}-{slug(path.title)}.svg"
    picture.write_text(saga_swimlane(entries, started_at=entries[0].occurred_at, waiting=waiting))
    path.picture = picture
    print(f"   money moved (the gateway's ledger): {', '.join(money) or 'none'}")
    print(f"   admin: {admin_url}/admin/orders/order/{path.order_id}/change/")
    print(f"   swimlane: {picture}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=f"http://127.0.0.1:{os.environ.get('PORT', '8000')}")
    args = parser.parse_args()
    api = Api(args.base_url)
    wait_for_server(api)
    ready = api.call("GET", "/readyz").body
    print(f"Shop at {api.base}: database {ready['database']}, broker {ready['broker']}.")
    plenty, scarce = products(api)
    print(f"Ordering {plenty['sku']} ({plenty['available']} available) and {scarce['sku']} ({scarce['available']}).")

    paths = [
        place(
            api,
            "Confirmed",
            "tok_visa is charged, stock is reserved, the order is confirmed; shipping prepares a shipment, "
            "which an operator dispatches.",
            [{"sku": plenty["sku"], "quantity": 1}],
            "tok_visa",
        ),
    ]
    same_database(paths[0].order_id)
    paths += [
        place(
            api,
            "Declined",
            "tok_chargeDeclined is declined: the order fails, nothing is reserved, no money moves.",
            [{"sku": plenty["sku"], "quantity": 1}],
            "tok_chargeDeclined",
        ),
    ]
    if scarce["available"] < 1000:
        paths.append(
            place(
                api,
                "Out of stock",
                f"One more {scarce['sku']} than inventory has: charged first, then the reservation fails, "
                "so payments refunds (compensation).",
                [{"sku": scarce["sku"], "quantity": scarce["available"] + 1}],
                "tok_visa",
            )
        )
    paths.append(duplicate_request(api, plenty["sku"]))
    twice = place(
        api,
        "Delivered twice",
        "Confirmed; then the broker delivers orders.order.created again (as after a relay crash between "
        "confirm and commit): every consumer's inbox has its message id already, so nothing happens twice.",
        [{"sku": plenty["sku"], "quantity": 1}],
        "tok_visa",
    )
    paths.append(twice)
    cancelled = place(
        api,
        "Cancelled",
        "Confirmed, then cancelled by the customer: payments refunds, inventory releases the stock, "
        "shipping cancels the shipment before it leaves.",
        [{"sku": plenty["sku"], "quantity": 2}],
        "tok_visa",
    )
    paths.append(cancelled)
    print(f"\nPlaced {len(paths)} orders through POST /api/checkout/.")
    wait_all(api, paths, "sagas running")

    reply = api.call("POST", f"/api/orders/{cancelled.order_id}/cancel/")
    cancelled.notes.append(f"POST /api/orders/<id>/cancel/ -> {reply.status} {reply.body.get('status')}")
    again = api.call("POST", f"/api/orders/{cancelled.order_id}/cancel/")
    cancelled.notes.append(f"cancel again -> {again.status} {again.body.get('code')}")

    print(f"\nDelivering {twice.title.lower()}'s orders.order.created a second time (same message id)...")
    message_id, sent_at = deliver_again(twice.order_id)
    twice.notes.append("the relay published orders.order.created again: its 'published' below is the second time")
    for handled in InboxMessage.objects.filter(message_id=message_id).order_by("handled_at"):
        when = "before" if handled.handled_at.timestamp() < sent_at else "!! after"
        twice.notes.append(
            f"{handled.consumer} handled it once, at {handled.handled_at:%H:%M:%S}, {when} the 2nd delivery"
        )
    charges = sum(line.startswith("charge") for line in ledger(twice.order_id))
    twice.notes.append(f"charges for this order: {charges}")
    dispatch(paths[0])
    wait_all(api, [cancelled, paths[0]], "compensating the cancellation, dispatching")

    print(
        "\nTimes are seconds after the order's first event. 'published' is when the relay recorded the broker's"
        "\nconfirm, so a fast consumer may show up a moment earlier."
    )
    PICTURES.mkdir(parents=True, exist_ok=True)
    for old in PICTURES.glob("*.svg"):
        old.unlink()
    for path in paths:
        print_timeline(api, path, api.base)
    print("\nEach saga as a picture (open them in a browser):")
    for path in paths:
        print(f"   {path.picture}")
    print(f"\nAll of it is in the admin ({api.base}/admin/, 'Saga overview') and the API docs ({api.base}/api/docs/).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
