from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from reliable_messaging.operator import ReadOnlyAdmin

from kernel.operations import order_panels
from kernel.saga_admin import SagaAdmin
from kernel.templatetags.ops import age, compact_time, short
from orders.admin_timeline import order_saga_view
from orders.models import CheckoutRequest, Order, OrderLine, ReturnSaga, StorefrontProduct
from orders.selectors import order_get


class OrderLineInline(admin.TabularInline):
    model = OrderLine
    fields = ["sku", "quantity", "unit_price"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


# Where a saga style may wrap in a narrow column (a soft hyphen: no hyphen shown unless it wraps).
STYLE_SYLLABLES = {
    Order.SagaStyle.CHOREOGRAPHY: ("choreo", "graphy"),
    Order.SagaStyle.ORCHESTRATION: ("orches", "tration"),
}


@admin.register(Order)
class OrderAdmin(ReadOnlyAdmin):
    list_display = [
        *("order", "status", "pending_for", "reason", "style", "customer_id", "total"),
        *("created", "updated"),
    ]
    list_display_links = ["order"]
    list_filter = ["status", "failure_reason", "saga_style"]
    ordering = ["-created_at", "-id"]  # newest first (ids are random)
    search_fields = ["=id", "customer_id"]
    date_hierarchy = "created_at"
    inlines = [OrderLineInline]

    def has_view_permission(self, request, obj=None):
        return request.user.is_staff and super().has_view_permission(request, obj)

    # Nine columns beside the sidebar and the filters at 1400 px: their long words may wrap, whole
    # where the column is wide enough (the filters keep them whole, as the API spells them).
    @admin.display(description="failure reason", ordering="failure_reason")
    def reason(self, obj):
        """``out_of_<wbr>stock``: it may wrap after an underscore."""
        if not obj.failure_reason:
            return "-"
        return format_html_join(mark_safe("_<wbr>"), "{}", ((part,) for part in obj.failure_reason.split("_")))

    @admin.display(description="saga style", ordering="saga_style")
    def style(self, obj):
        """``choreo-graphy``: it may wrap at its soft hyphen."""
        syllables = STYLE_SYLLABLES.get(obj.saga_style, (obj.saga_style,))
        return format_html_join(mark_safe("&shy;"), "{}", ((part,) for part in syllables))

    @admin.display(description="order id", ordering="id")
    def order(self, obj):
        return short(obj.id)

    @admin.display(description="created (UTC)", ordering="created_at")
    def created(self, obj):
        return compact_time(obj.created_at)

    @admin.display(description="updated (UTC)", ordering="updated_at")
    def updated(self, obj):
        return compact_time(obj.updated_at)

    @admin.display(description="pending for")
    def pending_for(self, obj):
        """A PENDING order's age, red past a minute: a stuck saga shows in the list."""
        if obj.status != Order.Status.PENDING:
            return "-"
        seconds = (timezone.now() - obj.created_at).total_seconds()
        return format_html('<span class="{}">{}</span>', "ops-bad" if seconds > 60 else "", age(seconds))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # The saga timeline, read through messaging's public API, and what other hosted contexts
        # show of the order (the orchestrator: its saga's state), without importing them.
        order = order_get(order_id=object_id)
        if order is not None and self.has_view_permission(request, order):
            panels = order_panels(str(order.id))
            extra_context = {**(extra_context or {}), "saga": order_saga_view(order), "panels": panels}
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(StorefrontProduct)
class StorefrontProductAdmin(ReadOnlyAdmin):
    list_display = ["sku", "name", "price", "available", "version", "updated_at"]
    search_fields = ["sku", "name"]


@admin.register(CheckoutRequest)
class CheckoutRequestAdmin(ReadOnlyAdmin):
    list_display = ["key", "order_id", "response_status", "created_at"]
    search_fields = ["=key", "=order_id"]
    exclude = ["response_body"]


@admin.register(ReturnSaga)
class ReturnSagaAdmin(SagaAdmin):
    """Each return, read-only (a saga moves only through its messages): its state, every
    transition, its step keys, and the saga it runs, drawn from its definition."""

    list_display = ["order", "state", "attempt", "version", "failure_reason", "updated"]
    fields = [
        *("id", "key", "definition_version", "state", "step_since", "failure_reason", "attempt", "deadline_id"),
        *("version", "step_keys", "data", "created_at", "updated_at", "saga_diagram"),
    ]
