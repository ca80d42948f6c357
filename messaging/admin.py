from django.contrib import admin

from messaging.models import DeadLetter, EventLogEntry, InboxMessage, OutboxMessage


class ReadOnlyAdmin(admin.ModelAdmin):
    """These tables are the delivery guarantees: an edit here would break them."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class PublishedFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("pending", "pending"), ("published", "published"), ("parked", "parked")]

    def queryset(self, request, queryset):
        if self.value() == "pending":
            return queryset.filter(published_at__isnull=True, parked_at__isnull=True)
        if self.value() == "published":
            return queryset.filter(published_at__isnull=False)
        if self.value() == "parked":
            return queryset.filter(published_at__isnull=True, parked_at__isnull=False)
        return queryset


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    list_display = [
        "event_id",
        "event_type",
        "aggregate_type",
        "aggregate_id",
        "created_at",
        "published_at",
        "attempts",
    ]
    list_filter = [PublishedFilter, "source", "event_type"]
    search_fields = ["=aggregate_id", "=correlation_id", "event_type", "=event_id"]
    exclude = ["payload"]


@admin.register(InboxMessage)
class InboxMessageAdmin(ReadOnlyAdmin):
    list_display = ["consumer", "message_id", "event_type", "correlation_id", "handled_at"]
    list_filter = ["consumer", "event_type"]
    search_fields = ["=message_id", "=correlation_id"]


@admin.register(EventLogEntry)
class EventLogEntryAdmin(ReadOnlyAdmin):
    list_display = ["message_id", "event_type", "correlation_id", "occurred_at", "recorded_at"]
    list_filter = ["event_type"]
    search_fields = ["=message_id", "=correlation_id"]


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = ["id", "consumer", "reason", "message_id", "event_type", "attempts", "last_failed_at", "replayed_at"]
    list_filter = ["consumer", "reason"]
    search_fields = ["=message_id", "=correlation_id", "event_type"]
    exclude = ["body"]
