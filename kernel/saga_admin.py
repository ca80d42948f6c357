"""The operator's view of one saga instance of the bus's engine, read-only (a saga moves only
through its messages): its state and version, every transition, and the saga it runs, drawn from
the definition version it keeps. A context's admin of its saga subclasses it."""

from django import forms
from django.contrib import admin
from django.utils.html import format_html
from reliable_messaging.operator import ReadOnlyAdmin
from reliable_messaging.sagas import SagaTransition, definition, diagram

from kernel.templatetags.ops import compact_time, short


class SagaTransitionInline(admin.TabularInline):
    model = SagaTransition
    fields = ["version", "from_state", "to_state", "cause", "at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["version"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


# Mermaid draws the diagram in the browser, from this app's static files (no CDN: the admin
# works offline, and the CSP allows scripts from this origin only); kernel/static/kernel/mermaid/README.md.
DIAGRAM_MEDIA = forms.Media(
    js=["kernel/mermaid/mermaid.min.js", "kernel/mermaid/init.js"], css={"all": ["kernel/mermaid/diagram.css"]}
)


class SagaAdmin(ReadOnlyAdmin):
    list_filter = ["state"]
    search_fields = ["key", "id"]
    ordering = ["-updated_at"]  # the latest moves first
    inlines = [SagaTransitionInline]

    @admin.display(description="order id", ordering="key")
    def order(self, saga):
        return short(saga.key)

    @admin.display(description="updated (UTC)", ordering="updated_at")
    def updated(self, saga):
        return compact_time(saga.updated_at)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        # Only the page that shows a diagram loads Mermaid (5 MB), not the list.
        if obj is not None and "saga_diagram" in self.get_fields(request, obj):
            context["media"] = context["media"] + DIAGRAM_MEDIA
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="the saga (Mermaid)")
    def saga_diagram(self, saga):
        return format_html('<pre class="mermaid">{}</pre>', diagram(definition(saga.name, saga.definition_version)))
