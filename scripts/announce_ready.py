#!/usr/bin/env python3
"""`make run`'s "up" line: printed once the API serves the catalogue checkout accepts.

`make run` starts every process at once. The web process answers within seconds, but orders
serves ``/api/products/`` from its own copy of the catalogue, which fills only once the seeded
products' events have passed through the relay and the consumers: until then the list is empty
and a checkout gets "unknown sku". So this waits for ``/readyz`` to answer 200 and the product
list to hold something (a deployment without the API: ``/readyz`` alone), and each ``--also`` URL
(the fake card gateway's ``/healthz``) to answer 200, then prints one line.

It runs in the background of the recipe's shell (``--parent``) and ends with it, quietly: a
Ctrl-C during the start leaves nothing behind. After ``--timeout`` seconds it says what it still
waits for, on stderr.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

POLL = 0.1  # seconds between two looks: the catalogue arrives a moment after the web process


def get(url: str) -> tuple[int, object]:
    """(status, decoded JSON body or None); status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def look(base: str, label: str = "make run", also: tuple[str, ...] = ()) -> tuple[str | None, str]:
    """(what the deployment does not serve yet or None, the line that says it is up)."""
    if waiting := next((url for url in also if get(url)[0] != 200), None):
        return f"{waiting} to answer 200", ""
    if get(f"{base}/readyz")[0] != 200:
        return "/readyz to answer 200 (the database and the broker)", ""
    status, products = get(f"{base}/api/products/")
    if status == 404:  # orders is not hosted here: no API to wait for
        return None, f"{label}: up: {base}/readyz answers 200"
    if status != 200 or not products:
        return "/api/products/ to list the catalogue (its events pass through the relay and the consumers)", ""
    return None, f"{label}: up: {base}/api/products/ lists the catalogue; checkouts are accepted"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True, help="the pid to end with (the recipe's shell)")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--label", default="make run", help="what the line names as up")
    parser.add_argument("--also", action="append", default=[], help="a URL that must answer 200 too")
    args = parser.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    deadline = time.monotonic() + args.timeout
    while os.getppid() == args.parent:
        missing, up = look(base, args.label, tuple(args.also))
        if missing is None:
            print(up, flush=True)
            return 0
        if time.monotonic() > deadline:
            line = f"{args.label}: not up after {args.timeout:g}s: still waiting for {missing}"
            print(line, file=sys.stderr, flush=True)
            return 1
        time.sleep(POLL)
    return 0  # make run ended first


if __name__ == "__main__":
    sys.exit(main())
