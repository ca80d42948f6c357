"""Profile N checkouts through the Django test client in one process: ``python -m bench.profile_checkout N``."""

import cProfile
import io
import json
import os
import pstats
import sys
import uuid

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from django.test import Client  # noqa: E402

BODY = json.dumps({"customer_id": "bench", "items": [{"sku": "BENCH", "quantity": 1}], "payment_token": "tok_visa"})


def main(count: int) -> None:
    client = Client()

    def checkouts(n: int) -> None:
        for _ in range(n):
            response = client.post(
                "/api/checkout/", BODY, content_type="application/json", headers={"Idempotency-Key": str(uuid.uuid4())}
            )
            assert response.status_code == 201, response.content

    checkouts(20)  # warm up: connections, URL resolver, serializers
    profiler = cProfile.Profile()
    profiler.enable()
    checkouts(count)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(r"(orders|messaging|rest_framework|django/db)", 30)
    print(out.getvalue())


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
