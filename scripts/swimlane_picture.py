#!/usr/bin/env python3
"""An order's swimlane as the admin draws it, as a standalone SVG file (docs/pictures/).

Run it with the environment of ``make run`` (it reads the same database), once the order's saga
has ended: ``--wait`` waits (at most that many seconds) until the order is no longer PENDING and
nothing waits in its saga. docs/operating.md ("Admin: where is order X stuck?") shows the whole recipe for
``docs/pictures/swimlane-out-of-stock.svg``.

The admin's picture scales to its box; a file gets a fixed size (its viewBox), which is how a
Markdown page shows an image.
"""

import argparse
import os
import re
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from orders.admin_timeline import order_saga_view  # noqa: E402
from orders.models import Order  # noqa: E402

SCALING = re.compile(r'width="100%" style="[^"]*"')


def settled_view(order_id: str, wait: float) -> dict:
    """The admin's view of the order once its saga has ended (or at once, with no ``wait``)."""
    try:
        uuid.UUID(order_id)
    except ValueError:
        sys.exit(f"not an order id: {order_id!r}")
    deadline = time.monotonic() + wait
    while True:
        order = Order.objects.filter(pk=order_id).first()
        if order is None:
            sys.exit(f"no order {order_id} in this database")
        view = order_saga_view(order)
        if not (view["pending"] or view["waiting"]):
            return view
        if time.monotonic() > deadline:
            sys.exit(f"order {order_id}'s saga has not ended (status {order.status}); try again, or a longer --wait")
        time.sleep(0.2)


def fixed_size(svg: str) -> str:
    width, height = re.search(r'viewBox="0 0 (\d+) (\d+)"', svg).groups()
    return SCALING.sub(f'width="{width}" height="{height}"', svg, count=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("order_id")
    parser.add_argument("--wait", type=float, default=0, help="seconds to wait for the saga to end")
    parser.add_argument("--output", type=Path, help="the file to write (only once drawn); default stdout")
    args = parser.parse_args()
    svg = fixed_size(str(settled_view(args.order_id, args.wait)["swimlane"])) + "\n"
    if args.output:
        args.output.write_text(svg)
    else:
        sys.stdout.write(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
