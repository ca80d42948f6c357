"""``/healthz`` (the process answers) and ``/readyz`` (it can reach its database and broker).

Both are exempt from the HTTPS redirect, so a load balancer can probe them over plain HTTP.
Each dependency gets one short attempt: a probe must answer well inside its own timeout.
"""

import logging

from drf_spectacular.utils import OpenApiExample, extend_schema, inline_serializer
from reliable_messaging.operator import broker_reachable, database_reachable, unmigrated_apps
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

logger = logging.getLogger(__name__)

BROKER_TIMEOUT = 2.0  # seconds; PostgreSQL's own connect_timeout is set in settings


class HealthApi(APIView):
    throttle_classes = []

    @extend_schema(
        tags=["operations"],
        operation_id="healthz",
        summary="Liveness: the process answers",
        responses={200: inline_serializer("Health", {"status": serializers.ChoiceField(choices=["ok"])})},
    )
    def get(self, request):
        return Response({"status": "ok"})


_Readiness = inline_serializer(
    "Readiness",
    {
        "database": serializers.ChoiceField(choices=["ok", "down", "unmigrated"]),
        "broker": serializers.ChoiceField(choices=["ok", "down"]),
    },
)


class ReadinessApi(APIView):
    throttle_classes = []

    @extend_schema(
        tags=["operations"],
        operation_id="readyz",
        summary="Readiness: database and broker reachable",
        description=(
            "200 when both are reachable, else 503. Each is tried once, with a short timeout. The database "
            "is `unmigrated` while migrations of this deployment's apps are missing (run prepare_deployment)."
        ),
        responses={200: _Readiness, 503: _Readiness},
        examples=[
            OpenApiExample("Ready", value={"database": "ok", "broker": "ok"}, status_codes=["200"]),
            OpenApiExample("Broker down", value={"database": "ok", "broker": "down"}, status_codes=["503"]),
        ],
    )
    def get(self, request):
        body = {
            "database": ("unmigrated" if unmigrated_apps() else "ok") if database_reachable() else "down",
            "broker": "ok" if broker_reachable(timeout=BROKER_TIMEOUT) else "down",
        }
        return Response(body, status=200 if set(body.values()) == {"ok"} else 503)
