"""The checkout API: thin views over orders' services and selectors."""

from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from kernel.exceptions import ApiError
from kernel.schema import NOT_FOUND, THROTTLED, error_response
from kernel.serializers import StrictCharField, StrictIntegerField, StrictSerializer
from orders.api_docs import (
    CHECKOUT_DESCRIPTION,
    CHECKOUT_ERRORS,
    CHECKOUT_EXAMPLES,
    CHECKOUT_HEADERS,
    ORDER_CONFIRMED,
    CheckoutBodySerializer,
)
from orders.models import Order
from orders.representations import order_representation
from orders.selectors import order_get, order_timeline, storefront_products
from orders.services.checkout import (
    CheckoutRejected,
    IdempotencyKeyInUse,
    IdempotencyKeyReused,
    Line,
    checkout,
    request_fingerprint,
)
from orders.services.returns import ReturnedOnce, order_return
from orders.services.saga import InvalidOrderState, OrderNotFound, order_cancel

IDEMPOTENCY_HEADER = "Idempotency-Key"


class TimelineEntrySerializer(serializers.Serializer):
    event_type = serializers.CharField(help_text="The routing key, e.g. `payments.payment.succeeded`.")
    message_id = serializers.CharField(help_text="The event's UUID, the same on every delivery.")
    occurred_at = serializers.DateTimeField()
    published_at = serializers.DateTimeField(allow_null=True, help_text="Null while the event waits in the outbox.")
    source = serializers.CharField(help_text="The context that produced it: orders, payments or inventory.")
    causation_id = serializers.CharField(allow_null=True, help_text="The message that caused this one.")
    state = serializers.ChoiceField(
        choices=["pending", "published", "parked", "scheduled"],
        help_text="scheduled: published at occurred_at, not before (a deadline); not a stuck event.",
    )


@extend_schema_serializer(component_name="OrderLine")
class OrderLineOutputSerializer(serializers.Serializer):
    sku = serializers.CharField()
    quantity = serializers.IntegerField()
    unit_price = serializers.DecimalField(max_digits=12, decimal_places=2)


@extend_schema_serializer(component_name="Order")
class OrderOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=Order.Status.values)
    failure_reason = serializers.ChoiceField(choices=Order.FailureReason.values, allow_null=True)
    customer_id = serializers.CharField()
    saga_style = serializers.ChoiceField(
        choices=Order.SagaStyle.values, help_text="How its saga runs (SAGA_STYLE when it was placed)."
    )
    ship_to = serializers.SerializerMethodField(help_text="The ISO 3166 country it ships to; null if none was given.")
    total = serializers.DecimalField(max_digits=12, decimal_places=2)
    currency = serializers.CharField()
    items = OrderLineOutputSerializer(source="lines.all", many=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    timeline = serializers.SerializerMethodField(
        help_text="Every event of this order from all contexts, published or not, in order of occurrence."
    )

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_ship_to(self, order: Order) -> str | None:
        return order.ship_to or None

    @extend_schema_field(TimelineEntrySerializer(many=True))
    def get_timeline(self, order: Order) -> list[dict]:
        return TimelineEntrySerializer(order_timeline(order=order), many=True).data


class ProductListApi(APIView):
    @extend_schema_serializer(component_name="Product")
    class OutputSerializer(serializers.Serializer):
        sku = serializers.CharField()
        name = serializers.CharField()
        price = serializers.DecimalField(max_digits=12, decimal_places=2)
        available = serializers.IntegerField(help_text="May trail reservations by moments; 0 is still accepted.")

    @extend_schema(
        tags=["catalogue"],
        operation_id="product_list",
        summary="Products checkout accepts now",
        responses={200: OutputSerializer(many=True)},
    )
    def get(self, request):
        return Response(self.OutputSerializer(storefront_products(), many=True).data)


@method_decorator(never_cache, name="dispatch")  # an order is personal: no cache may keep it
class CheckoutApi(APIView):
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "checkout"

    class ItemSerializer(StrictSerializer):
        sku = StrictCharField(max_length=64)
        quantity = StrictIntegerField(min_value=1, max_value=1000)

    class InputSerializer(StrictSerializer):
        # Verbatim, never trimmed: " alice" is refused (a client bug that would split one
        # customer's orders over two ids); a token is the gateway's to judge (unknown: declined).
        customer_id = StrictCharField(min_length=1, max_length=255, refuse_surrounding_whitespace=True)
        items = serializers.ListField(min_length=1, max_length=50)
        payment_token = StrictCharField(min_length=1, max_length=255)
        ship_to = StrictCharField(required=False, min_length=2, max_length=2)

        def validate_ship_to(self, value):
            if not (value.isascii() and value.isalpha() and value.isupper()):
                raise serializers.ValidationError("an ISO 3166 country code: two capital letters, e.g. DE")
            return value

        def validate_items(self, items):
            serializer = CheckoutApi.ItemSerializer(data=items, many=True)
            serializer.is_valid(raise_exception=True)
            skus = [item["sku"] for item in serializer.validated_data]
            repeated = sorted({sku for sku in skus if skus.count(sku) > 1})
            if repeated:
                raise serializers.ValidationError([f"sku repeated: {sku}" for sku in repeated])
            return serializer.validated_data

    @extend_schema(
        tags=["orders"],
        operation_id="checkout",
        summary="Place an order (starts the saga)",
        description=CHECKOUT_DESCRIPTION,
        parameters=CHECKOUT_HEADERS,
        request=CheckoutBodySerializer,
        responses={
            201: OpenApiResponse(OrderOutputSerializer, description="The order, PENDING; the saga runs from here."),
            **CHECKOUT_ERRORS,
            429: THROTTLED,
        },
        examples=CHECKOUT_EXAMPLES,
    )
    def post(self, request):
        key = idempotency_key_of(request)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            result = checkout(
                key=key,
                request_hash=request_fingerprint(request.data),
                customer_id=data["customer_id"],
                lines=[Line(item["sku"], item["quantity"]) for item in data["items"]],
                payment_token=data["payment_token"],
                ship_to=data.get("ship_to", ""),
            )
        except CheckoutRejected as exc:
            raise serializers.ValidationError(exc.errors) from None
        except IdempotencyKeyReused:
            raise ApiError(
                422, "idempotency_key_reused", "This Idempotency-Key was used with a different body."
            ) from None
        except IdempotencyKeyInUse:
            raise ApiError(
                409, "idempotency_key_in_use", "A request with this Idempotency-Key is in progress."
            ) from None
        response = Response(result.body, status=result.status)
        if result.replayed:
            response["Idempotent-Replayed"] = "true"
        return response


def idempotency_key_of(request) -> str:
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        raise serializers.ValidationError({IDEMPOTENCY_HEADER: ["This header is required."]})
    if not 1 <= len(key) <= 255 or not all(" " <= ch <= "~" for ch in key):
        raise serializers.ValidationError({IDEMPOTENCY_HEADER: ["Use 1 to 255 printable ASCII characters."]})
    return key


ORDER_ID = OpenApiParameter(
    "order_id",
    OpenApiTypes.UUID,
    OpenApiParameter.PATH,
    description="The order's id: a random UUID, the guest's capability to read and cancel the order.",
)


@method_decorator(never_cache, name="dispatch")  # an order is personal: no cache may keep it
class OrderDetailApi(APIView):
    @extend_schema(
        tags=["orders"],
        operation_id="order_detail",
        summary="An order, its status and its saga timeline",
        parameters=[ORDER_ID],
        responses={200: OrderOutputSerializer, 404: NOT_FOUND},
        examples=[ORDER_CONFIRMED],
    )
    def get(self, request, order_id: str):
        order = order_get(order_id=order_id)
        if order is None:
            raise ApiError(404, "not_found", "No such order.")
        return Response(order_representation(order))


@method_decorator(never_cache, name="dispatch")  # an order is personal: no cache may keep it
class OrderCancelApi(APIView):
    @extend_schema(
        tags=["orders"],
        operation_id="order_cancel",
        summary="Cancel a PENDING or CONFIRMED order",
        description="The order is CANCELLED at once; payments refunds a charge and inventory releases reserved "
        "stock, each exactly once (watch the timeline).",
        parameters=[ORDER_ID],
        request=None,
        responses={
            202: OpenApiResponse(OrderOutputSerializer, description="The order, now CANCELLED."),
            404: NOT_FOUND,
            409: error_response(
                "Already FAILED or CANCELLED.",
                ("Already failed", {"code": "invalid_state", "detail": "The order is FAILED and cannot be cancelled."}),
            ),
        },
    )
    def post(self, request, order_id: str):
        order = order_get(order_id=order_id)
        if order is None:
            raise ApiError(404, "not_found", "No such order.")
        try:
            order_cancel(order_id=order.id)
        except OrderNotFound:
            raise ApiError(404, "not_found", "No such order.") from None
        except InvalidOrderState as exc:
            raise ApiError(409, "invalid_state", f"The order is {exc.order.status} and cannot be cancelled.") from None
        return Response(order_representation(order_get(order_id=order.id)), status=status.HTTP_202_ACCEPTED)


@method_decorator(never_cache, name="dispatch")  # an order is personal: no cache may keep it
class OrderReturnApi(APIView):
    @extend_schema(
        tags=["orders"],
        operation_id="order_return",
        summary="Return a CONFIRMED order",
        description="The order is RETURNING at once, then RETURNED once shipping has stopped the parcel or booked "
        "its pickup, inventory has restocked its lines and payments has refunded its total (watch the timeline). "
        "A refund payments refuses undoes the return: the order is CONFIRMED again, and cannot be returned again. "
        "A second return of the same order, while returning or after, is a 409.",
        parameters=[ORDER_ID],
        request=None,
        responses={
            202: OpenApiResponse(OrderOutputSerializer, description="The order, now RETURNING."),
            404: NOT_FOUND,
            409: error_response(
                "Not CONFIRMED (still PENDING, FAILED, CANCELLED, RETURNING or RETURNED), or its return was refused.",
                ("Returning", {"code": "invalid_state", "detail": "The order is RETURNING and cannot be returned."}),
            ),
        },
    )
    def post(self, request, order_id: str):
        order = order_get(order_id=order_id)
        if order is None:
            raise ApiError(404, "not_found", "No such order.")
        try:
            order_return(order_id=order.id)
        except InvalidOrderState as exc:
            raise ApiError(409, "invalid_state", f"The order is {exc.order.status} and cannot be returned.") from None
        except ReturnedOnce:
            raise ApiError(
                409, "invalid_state", "The order's return was refused: it cannot be returned again."
            ) from None
        return Response(order_representation(order_get(order_id=order.id)), status=status.HTTP_202_ACCEPTED)
