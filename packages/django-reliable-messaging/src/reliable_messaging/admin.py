"""The operator's console over messaging's tables. Read-only, except for the actions (list
actions and buttons on an object's own page, each behind a confirmation), which call the same
services as the ``dead_letters`` and ``outbox_retry_parked`` commands."""

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from reliable_messaging._admin_base import ReadOnlyAdmin
from reliable_messaging._admin_tools import ObjectAction, ObjectActionsMixin, correlation_link
from reliable_messaging._dead_letters import (
    EditRefused,
    dead_letter_display_body,
    dead_letter_edit,
    dead_letter_groups,
    dead_letter_payload_text,
    dead_letter_purge,
    dead_letter_replay,
    dead_letters_not_stored,
    describe_change,
)
from reliable_messaging._edge import InvalidMessage, schema_version_of
from reliable_messaging._housekeeping import outbox_retry_parked
from reliable_messaging._masking import mask_sensitive, mask_text
from reliable_messaging._scheduled import cancel_scheduled
from reliable_messaging._selectors import outbox_backlog
from reliable_messaging.models import (
    DeadLetter,
    DeadLetterEdit,
    DeadLetterFlood,
    EventLogEntry,
    InboxMessage,
    OutboxMessage,
    ScheduledMessage,
)
from reliable_messaging.templatetags.messaging_display import breakable_key, compact_time
from reliable_messaging.templatetags.messaging_display import short as short_id


def pretty(data: Any) -> SafeString:
    return format_html('<pre class="ops-pre">{}</pre>', json.dumps(mask_sensitive(data), indent=2, sort_keys=True))


class MessageTableAdmin(ReadOnlyAdmin):
    """These tables are the delivery guarantees: an edit here would break them."""

    @admin.display(description="event type", ordering="event_type")
    def event(self, obj: Any) -> str:
        return breakable_key(obj.event_type)


class EventRowColumns:
    """The columns of a table of events this deployment produced (outbox, scheduled messages)."""

    @admin.display(description="message id", ordering="event_id")
    def message(self, obj: OutboxMessage | ScheduledMessage) -> str:
        return short_id(obj.event_id)

    @admin.display(description="aggregate", ordering="aggregate_id")
    def aggregate(self, obj: OutboxMessage | ScheduledMessage) -> str:
        return short_id(obj.aggregate_id)

    @admin.display(description="payload (sensitive fields masked)")
    def payload_pretty(self, obj: OutboxMessage | ScheduledMessage) -> SafeString:
        return pretty(obj.payload)


class PublishedFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("pending", "pending"), ("published", "published"), ("parked", "parked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "pending":
            return queryset.filter(published_at__isnull=True, parked_at__isnull=True)
        if self.value() == "published":
            return queryset.filter(published_at__isnull=False)
        if self.value() == "parked":
            return queryset.filter(published_at__isnull=True, parked_at__isnull=False)
        return queryset


def retry_parked_row(model_admin: Any, request: HttpRequest, row: OutboxMessage) -> tuple[int, str]:
    if outbox_retry_parked(ids=[row.pk]):
        return messages.SUCCESS, f"Outbox row #{row.pk} will be published again."
    return messages.WARNING, f"Outbox row #{row.pk} is not parked: unchanged."


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ObjectActionsMixin, EventRowColumns, MessageTableAdmin):
    list_display = ["id", "message", "state_badge", "event", "aggregate", "created", "published", "attempts"]
    list_display_links = ["id", "message"]
    list_filter = [PublishedFilter, "source", "event_type"]
    # aggregate id, routing key (event_type), message id (event_id), correlation id
    search_fields = ["=aggregate_id", "=correlation_id", "event_type", "=event_id"]
    search_help_text = "An aggregate id, correlation id, message id, or part of a routing key."
    fields = [
        "event_id",
        "state_badge",
        "source",
        "event_type",
        "aggregate_type",
        "aggregate_id",
        "correlation_id",
        "causation_id",
        "traceparent",
        "schema_version",
        "created_at",
        "published_at",
        "attempts",
        "last_error",
        "next_attempt_at",
        "parked_at",
        "payload_pretty",
    ]
    readonly_fields = ["state_badge", "payload_pretty"]
    actions = ["retry_parked"]
    object_actions = [
        ObjectAction(
            "retry",
            "Retry this parked row",
            "The relay will try to publish it again, with a fresh set of attempts.",
            "operate",
            retry_parked_row,
        )
    ]

    @admin.display(description="created (UTC)", ordering="created_at")
    def created(self, obj: OutboxMessage) -> str:
        return compact_time(obj.created_at)

    @admin.display(description="published after", ordering="published_at")
    def published(self, obj: OutboxMessage) -> str:
        """How long after its creation the relay published it: narrower than a second date, and
        the relay's lag at a glance (the full time on hover)."""
        if obj.published_at is None:
            return "-"
        lag = (obj.published_at - obj.created_at).total_seconds()
        return format_html('<span title="{}">{}s</span>', obj.published_at.isoformat(), f"{lag:.3f}")

    @admin.display(description="state")
    def state_badge(self, obj: OutboxMessage) -> SafeString:
        css = {"published": "ops-ok", "pending": "ops-warn", "parked": "ops-bad"}[obj.state]
        return format_html('<span class="{}">{}</span>', css, obj.state)

    @admin.action(description="Retry the selected parked rows", permissions=["operate"])
    def retry_parked(self, request: HttpRequest, queryset: QuerySet[OutboxMessage]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        retried = outbox_retry_parked(ids=ids)
        skipped = len(ids) - retried
        self.message_user(request, f"{retried} parked row(s) will be published again.", messages.SUCCESS)
        if skipped:
            self.message_user(request, f"{skipped} selected row(s) were not parked: unchanged.", messages.WARNING)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return super().changelist_view(request, {**(extra_context or {}), "backlog": outbox_backlog()})


@admin.register(InboxMessage)
class InboxMessageAdmin(MessageTableAdmin):
    list_display = ["consumer", "message", "event", "correlation", "handled"]
    list_filter = ["consumer", "event_type"]
    search_fields = ["=message_id", "=correlation_id"]
    search_help_text = "A message id or a correlation id."

    @admin.display(description="message id", ordering="message_id")
    def message(self, obj: InboxMessage) -> str:
        return short_id(obj.message_id)

    @admin.display(description="correlation id", ordering="correlation_id")
    def correlation(self, obj: InboxMessage) -> str:
        return short_id(obj.correlation_id)

    @admin.display(description="handled (UTC)", ordering="handled_at")
    def handled(self, obj: InboxMessage) -> str:
        return compact_time(obj.handled_at)


@admin.register(EventLogEntry)
class EventLogEntryAdmin(MessageTableAdmin):
    list_display = ["message", "event", "correlation", "occurred", "recorded"]
    list_display_links = ["message"]
    list_filter = ["event_type"]
    search_fields = ["=message_id", "=correlation_id"]
    exclude = ["payload"]
    readonly_fields = ["payload_pretty"]

    @admin.display(description="message id", ordering="message_id")
    def message(self, obj: EventLogEntry) -> str:
        return short_id(obj.message_id)

    @admin.display(description="correlation id", ordering="correlation_id")
    def correlation(self, obj: EventLogEntry) -> str:
        return short_id(obj.correlation_id)

    @admin.display(description="occurred (UTC)", ordering="occurred_at")
    def occurred(self, obj: EventLogEntry) -> str:
        return compact_time(obj.occurred_at)

    @admin.display(description="recorded (UTC)", ordering="recorded_at")
    def recorded(self, obj: EventLogEntry) -> str:
        return compact_time(obj.recorded_at)

    @admin.display(description="payload (sensitive fields masked)")
    def payload_pretty(self, obj: EventLogEntry) -> SafeString:
        return pretty(obj.payload)


def replay_messages(ids: list[int], new_id: bool) -> list[tuple[int, str]]:
    """Replay dead letters; one (level, text) per letter for the operator."""
    try:
        outcomes = dead_letter_replay(ids=ids, new_id=new_id)
    except Exception as exc:  # noqa: BLE001 - the broker may be down: say so instead of a 500
        return [(messages.ERROR, f"Nothing replayed: {type(exc).__name__}: {exc}")]
    said = []
    for o in outcomes:
        note = f": {o.note}" if o.note else ""
        if o.replayed:
            said.append((messages.SUCCESS, f"#{o.dead_letter_id} replayed to {o.consumer}{note}"))
        else:
            said.append((messages.WARNING, f"#{o.dead_letter_id} NOT replayed{note}"))
    return said


def replay_letter(new_id: bool) -> Callable[[Any, HttpRequest, DeadLetter], tuple[int, str]]:
    def run(model_admin: Any, request: HttpRequest, letter: DeadLetter) -> tuple[int, str]:
        [said] = replay_messages([letter.pk], new_id)
        return said

    return run


def purge_letter(model_admin: Any, request: HttpRequest, letter: DeadLetter) -> tuple[int, str]:
    return messages.SUCCESS, f"{dead_letter_purge(ids=[letter.pk])} dead letter purged (#{letter.pk})."


class DeadLetterStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("waiting", "waiting"), ("edited", "waiting, edited"), ("replayed", "replayed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "waiting":
            return queryset.filter(replayed_at__isnull=True)
        if self.value() == "edited":
            return queryset.filter(replayed_at__isnull=True, edits__isnull=False).distinct()
        if self.value() == "replayed":
            return queryset.filter(replayed_at__isnull=False)
        return queryset


class PayloadForm(forms.Form):
    payload = forms.CharField(
        label="Payload (JSON)",
        strip=False,
        widget=forms.Textarea(attrs={"rows": 24, "cols": 100, "class": "ops-mono", "spellcheck": "false"}),
        help_text="A JSON object. A sensitive field left as it is shown (masked) keeps its value.",
    )


def schema_named(letter: DeadLetter) -> str:
    """The schema an edit of ``letter`` is checked against: ``<event type> v<N>``."""
    try:
        return f"{letter.event_type or '(no event type)'} v{schema_version_of(letter.headers)}"
    except InvalidMessage as exc:
        return f"{letter.event_type or '(no event type)'}: {exc.detail}"


@admin.register(DeadLetter)
class DeadLetterAdmin(ObjectActionsMixin, MessageTableAdmin):
    list_display = ["id", "consumer", "reason", "message", "event", "attempts", "last_failed", "replayed", "edited"]
    object_actions = [
        ObjectAction(
            "replay",
            "Replay to its consumer",
            "The message goes back to its own consumer's queue only, with the same message id: "
            "if that consumer handled it meanwhile, nothing happens twice. An edited dead letter goes "
            "as its newest edit, with a new message id.",
            "operate",
            replay_letter(new_id=False),
        ),
        ObjectAction(
            "replay-new-id",
            "Replay as a new message",
            "The message goes back to its own consumer's queue with a new message id, so it runs again "
            "even if that consumer handled it before (only the consumer's own state then guards against a "
            "second effect).",
            "operate",
            replay_letter(new_id=True),
        ),
        ObjectAction(
            "purge",
            "Purge this dead letter",
            "The dead letter is deleted and its message is gone for good: replay it first if it still matters.",
            "purge",
            purge_letter,
            back_to_list=True,
        ),
    ]
    list_filter = [DeadLetterStateFilter, "consumer", "reason", "event_type"]
    search_fields = ["=message_id", "=correlation_id", "event_type"]
    search_help_text = "A message id, a correlation id, or part of an event type."
    fields = [
        "consumer",
        "reason",
        "error_masked",
        "message_id",
        "event_type",
        "routing_key",
        "correlation",
        "attempts",
        "first_failed_at",
        "last_failed_at",
        "replayed_at",
        "replay_count",
        "body_pretty",
        "edited_payload",
        "edit_trail",
        "headers_pretty",
        "traceback_masked",
    ]
    readonly_fields = [
        "error_masked",
        "correlation",
        "body_pretty",
        "edited_payload",
        "edit_trail",
        "headers_pretty",
        "traceback_masked",
    ]
    actions = ["replay", "replay_new_id", "purge"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[DeadLetter]:
        letters: QuerySet[DeadLetter] = super().get_queryset(request)
        return letters.annotate(edited=Exists(DeadLetterEdit.objects.filter(dead_letter=OuterRef("pk"))))

    @admin.display(description="message id", ordering="message_id")
    def message(self, obj: DeadLetter) -> str:
        return short_id(obj.message_id)

    @admin.display(description="last failed (UTC)", ordering="last_failed_at")
    def last_failed(self, obj: DeadLetter) -> str:
        return compact_time(obj.last_failed_at)

    @admin.display(description="replayed (UTC)", ordering="replayed_at")
    def replayed(self, obj: DeadLetter) -> str:
        return compact_time(obj.replayed_at)

    @admin.display(description="edited", boolean=True, ordering="edited")
    def edited(self, obj: DeadLetter) -> bool:
        return bool(getattr(obj, "edited", False))

    @admin.display(description="correlation id")
    def correlation(self, obj: DeadLetter) -> str:
        return correlation_link(obj.correlation_id)

    @admin.display(description="error")
    def error_masked(self, obj: DeadLetter) -> str:
        return mask_text(obj.error)

    @admin.display(description="body as received (sensitive fields masked)")
    def body_pretty(self, obj: DeadLetter) -> SafeString:
        return format_html('<pre class="ops-pre">{}</pre>', dead_letter_display_body(obj))

    @admin.display(description="payload a replay publishes (the newest edit)")
    def edited_payload(self, obj: DeadLetter) -> str:
        if not obj.edits.exists():
            return "- (not edited: the body as received)"
        return format_html('<pre class="ops-pre" id="edited-payload">{}</pre>', dead_letter_payload_text(obj))

    @admin.display(description="edits (audit trail)")
    def edit_trail(self, obj: DeadLetter) -> str:
        edits = list(obj.edits.order_by("id"))
        if not edits:
            return "-"
        rows = format_html_join(
            "",
            '<tr><td>#{}</td><td>{}</td><td>{}</td><td>{}</td><td><pre class="ops-pre">{}</pre></td><td>{}</td></tr>',
            (
                (
                    edit.pk,
                    compact_time(edit.edited_at),
                    edit.edited_by,
                    edit.via,
                    "\n".join(describe_change(change) for change in edit.diff),
                    edit_replay(edit),
                )
                for edit in edits
            ),
        )
        return format_html(
            '<table class="ops-table" id="edit-trail"><thead><tr><th>edit</th><th>when (UTC)</th><th>who</th>'
            "<th>via</th><th>changes (sensitive fields masked)</th><th>replayed as</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="headers")
    def headers_pretty(self, obj: DeadLetter) -> SafeString:
        return pretty(obj.headers)

    @admin.display(description="traceback")
    def traceback_masked(self, obj: DeadLetter) -> str:
        return format_html('<pre class="ops-pre">{}</pre>', mask_text(obj.traceback)) if obj.traceback else "-"

    def _replay(self, request: HttpRequest, queryset: QuerySet[DeadLetter], new_id: bool) -> None:
        for level, text in replay_messages(list(queryset.values_list("pk", flat=True)), new_id):
            self.message_user(request, text, level)

    @admin.action(description="Replay to the original consumer (same message id)", permissions=["operate"])
    def replay(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        self._replay(request, queryset, new_id=False)

    @admin.action(description="Replay as a new message (new message id: runs again)", permissions=["operate"])
    def replay_new_id(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        self._replay(request, queryset, new_id=True)

    @admin.action(description="Purge (delete) the selected dead letters", permissions=["purge"])
    def purge(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> TemplateResponse | None:
        if request.POST.get("confirm") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "title": "Purge dead letters?",
                "opts": self.model._meta,
                "letters": queryset,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            }
            return TemplateResponse(request, "admin/messaging/deadletter/purge_confirmation.html", context)
        purged = dead_letter_purge(ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{purged} dead letter(s) purged.", messages.SUCCESS)
        return None

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("messaging.delete_deadletter")

    # --- the edit page and the grouped page ---------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        own = [
            path("grouped/", self.admin_site.admin_view(self.grouped_view), name="messaging_deadletter_grouped"),
            path(
                "<path:object_id>/edit/", self.admin_site.admin_view(self.edit_view), name="messaging_deadletter_edit"
            ),
        ]
        return own + super().get_urls()

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        letter = self.get_object(request, object_id)
        editable = letter is not None and letter.replayed_at is None and self.has_operate_permission(request)
        edit_url = reverse("admin:messaging_deadletter_edit", args=[letter.pk]) if editable and letter else None
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "edit_url": edit_url})

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        grouped_url = reverse("admin:messaging_deadletter_grouped")
        if request.method == "GET" and (not_stored := dead_letters_not_stored()):
            counts = format_html_join(", ", "{} {}: {}", ((c, r, f"{n:,}") for c, r, n in not_stored))
            flood_url = reverse("admin:messaging_deadletterflood_changelist")
            self.message_user(
                request,
                format_html(
                    'Not stored, counted only (over DEAD_LETTER_FLOOD_LIMIT): {}. <a href="{}">By window</a>.',
                    counts,
                    flood_url,
                ),
                messages.WARNING,
            )
        return super().changelist_view(request, {**(extra_context or {}), "grouped_url": grouped_url})

    def edit_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A form with the payload a replay would publish; an edit is checked as its consumer checks a
        message (the refusal is shown in the form, nothing changed), then recorded with its author."""
        if not self.has_operate_permission(request):
            raise PermissionDenied
        letter = self.get_object(request, object_id)
        if letter is None:
            raise Http404(f"no dead letter {object_id}")
        change_url = reverse("admin:messaging_deadletter_change", args=[letter.pk])
        if letter.replayed_at is not None:
            self.message_user(
                request, f"Dead letter #{letter.pk} was replayed: only a waiting one is edited.", messages.WARNING
            )
            return HttpResponseRedirect(change_url)
        if request.method == "POST":
            form = PayloadForm(request.POST)
            if form.is_valid():
                try:
                    edit = dead_letter_edit(
                        letter.pk, form.cleaned_data["payload"], by=request.user.get_username(), via="admin"
                    )
                except EditRefused as refused:
                    form.add_error("payload", str(refused))
                else:
                    changes = len(edit.diff)
                    self.message_user(
                        request,
                        f"Dead letter #{letter.pk} edited (edit #{edit.pk}, {changes} change(s)): its replay publishes "
                        "the edit as a new message.",
                        messages.SUCCESS,
                    )
                    if "_replay" in request.POST:
                        for level, text in replay_messages([letter.pk], new_id=True):
                            self.message_user(request, text, level)
                    return HttpResponseRedirect(change_url)
        else:
            form = PayloadForm(initial={"payload": dead_letter_payload_text(letter)})
        context = {
            **self.admin_site.each_context(request),
            "title": f"Edit the payload of dead letter #{letter.pk}",
            "opts": self.model._meta,
            "object": letter,
            "form": form,
            "schema": schema_named(letter),
            "error": mask_text(letter.error),
            "change_url": change_url,
        }
        return TemplateResponse(request, "admin/messaging/deadletter/edit_payload.html", context)

    def grouped_view(self, request: HttpRequest) -> HttpResponse:
        """Dead letters counted per (reason, event type), each count a link to those letters."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        consumer = request.GET.get("consumer") or ""
        letters = DeadLetter.objects.filter(consumer=consumer) if consumer else DeadLetter.objects.all()
        changelist = reverse("admin:messaging_deadletter_changelist")

        def listed(**lookups: str) -> str:
            given = {"consumer": consumer, **lookups} if consumer else lookups
            return f"{changelist}?{urlencode(given)}"

        groups = [
            {
                "group": group,
                "waiting_url": listed(reason=group.reason, event_type=group.event_type, state="waiting"),
                "replayed_url": listed(reason=group.reason, event_type=group.event_type, state="replayed"),
                "all_url": listed(reason=group.reason, event_type=group.event_type),
            }
            for group in dead_letter_groups(letters)
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Dead letters by reason and event type" + (f" ({consumer})" if consumer else ""),
            "opts": self.model._meta,
            "groups": groups,
            "consumer": consumer,
            "consumers": list(DeadLetter.objects.order_by("consumer").values_list("consumer", flat=True).distinct()),
            "changelist_url": changelist,
        }
        return TemplateResponse(request, "admin/messaging/deadletter/grouped.html", context)


@admin.register(DeadLetterFlood)
class DeadLetterFloodAdmin(ReadOnlyAdmin):
    """Refusals of hostile input per consumer, reason and window: beyond DEAD_LETTER_FLOOD_LIMIT of a
    window, counted here and not stored as dead letters."""

    list_display = ["consumer", "reason", "window", "received", "stored", "not_stored", "last"]
    list_filter = ["consumer", "reason"]
    ordering = ["-window_start", "consumer", "reason"]

    @admin.display(description="window from (UTC)", ordering="window_start")
    def window(self, obj: DeadLetterFlood) -> str:
        return compact_time(obj.window_start)

    @admin.display(description="counted only")
    def not_stored(self, obj: DeadLetterFlood) -> int:
        return obj.not_stored

    @admin.display(description="last (UTC)", ordering="last_at")
    def last(self, obj: DeadLetterFlood) -> str:
        return compact_time(obj.last_at)


def edit_replay(edit: DeadLetterEdit) -> str:
    if edit.replayed_at is None:
        return "-"
    return format_html('<span class="ops-mono">{}</span> at {}', edit.replayed_as, compact_time(edit.replayed_at))


def cancel_scheduled_message(model_admin: Any, request: HttpRequest, row: ScheduledMessage) -> tuple[int, str]:
    if cancel_scheduled(row.event_id):
        return messages.SUCCESS, f"Scheduled message {row.event_id} cancelled: it will not be published."
    return messages.WARNING, f"Scheduled message {row.event_id} was already moved to the outbox: not cancelled."


@admin.register(ScheduledMessage)
class ScheduledMessageAdmin(ObjectActionsMixin, EventRowColumns, MessageTableAdmin):
    """Messages published for later delivery: scheduled, not stuck, until their time; the relay
    then moves them to the outbox (where they show as pending, then published)."""

    list_display = ["message", "event", "aggregate", "correlation", "deliver", "overdue"]
    list_display_links = ["message"]
    list_filter = ["source", "event_type"]
    search_fields = ["=aggregate_id", "=correlation_id", "event_type", "=event_id"]
    search_help_text = "An aggregate id, correlation id, message id, or part of a routing key."
    fields = [
        "event_id",
        "source",
        "event_type",
        "aggregate_type",
        "aggregate_id",
        "correlation_id",
        "causation_id",
        "schema_version",
        "created_at",
        "deliver_at",
        "payload_pretty",
    ]
    readonly_fields = ["payload_pretty"]
    object_actions = [
        ObjectAction(
            "cancel",
            "Cancel this scheduled message",
            "It is deleted before its time and never published (reliable_messaging.api.cancel_scheduled).",
            "operate",
            cancel_scheduled_message,
            back_to_list=True,
        )
    ]

    @admin.display(description="correlation id", ordering="correlation_id")
    def correlation(self, obj: ScheduledMessage) -> str:
        return correlation_link(obj.correlation_id)

    @admin.display(description="deliver at (UTC)", ordering="deliver_at")
    def deliver(self, obj: ScheduledMessage) -> str:
        return compact_time(obj.deliver_at)

    @admin.display(description="state")
    def overdue(self, obj: ScheduledMessage) -> SafeString:
        """Scheduled until its time; past it, waiting for a relay to move it (none running?)."""
        late = (timezone.now() - obj.deliver_at).total_seconds()
        if late < 0:
            return format_html('<span class="ops-ok">{}</span>', "scheduled")
        if late < 60:  # a relay moves it within a poll interval or two
            return format_html('<span class="ops-warn">{}</span>', "due, being moved")
        return format_html('<span class="ops-bad">{}</span>', "overdue: no relay moves it")
