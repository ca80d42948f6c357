"""Pieces of the operator's console: buttons on an object's own page, compact times, correlation links.

An object action is a button on the object's page that leads to a confirmation page; only a
POST from that page runs it, so a stray link or a crawler cannot replay or purge anything.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from reliable_messaging._links import correlation_url
from reliable_messaging.templatetags.messaging_display import compact_time  # noqa: F401 - the lists here use it

if TYPE_CHECKING:
    from reliable_messaging._admin_base import ModelAdmin

    _Mixed = ModelAdmin  # the mixin is always mixed into a ModelAdmin
else:
    _Mixed = object


@dataclass(frozen=True)
class ObjectAction:
    name: str  # in the URL: <object id>/<name>/
    label: str  # the button and the confirmation
    explanation: str  # what happens, said on the confirmation page
    permission: str  # "operate" or "purge": the admin's has_<permission>_permission
    # (model_admin, request, obj) -> (level, message); the object may be gone afterwards
    run: Callable[[Any, HttpRequest, Any], tuple[int, str]]
    back_to_list: bool = False  # after running, show the list (the object was deleted)


class ObjectActionsMixin(_Mixed):
    object_actions: list[ObjectAction] = []

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Actions (retry, replay, purge) need the model's change permission, not only view."""
        opts = self.model._meta
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    def allowed_object_actions(self, request: HttpRequest) -> list[ObjectAction]:
        return [a for a in self.object_actions if getattr(self, f"has_{a.permission}_permission")(request)]

    def get_urls(self) -> list[URLPattern]:
        info = self.model._meta.app_label, self.model._meta.model_name
        own = [
            path(
                f"<path:object_id>/{action.name}/",
                self.admin_site.admin_view(self._object_action_view(action)),
                name=f"{info[0]}_{info[1]}_{action.name}",
            )
            for action in self.object_actions
        ]
        return own + super().get_urls()

    def _object_action_view(self, action: ObjectAction) -> Callable[[HttpRequest, str], HttpResponse]:
        def view(request: HttpRequest, object_id: str) -> HttpResponse:
            if action not in self.allowed_object_actions(request):
                raise PermissionDenied
            obj = self.get_object(request, object_id)
            if obj is None:
                raise Http404(f"no {self.model._meta.verbose_name} {object_id}")
            opts = self.model._meta
            if request.method == "POST" and request.POST.get("confirm") == "yes":
                level, text = action.run(self, request, obj)
                self.message_user(request, text, level)
                name = "changelist" if action.back_to_list else "change"
                args = [] if action.back_to_list else [obj.pk]
                return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_{name}", args=args))
            context = {
                **self.admin_site.each_context(request),
                "title": f"{action.label}?",
                "opts": opts,
                "object": obj,
                "action": action,
            }
            return TemplateResponse(request, "admin/messaging/object_action_confirmation.html", context)

        return view

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra_context = {**(extra_context or {}), "object_actions": self.allowed_object_actions(request)}
        return super().change_view(request, object_id, form_url, extra_context)


def correlation_link(correlation_id: str) -> str:
    """A link to the page about this correlation id (where a hosted context registered one:
    ``reliable_messaging.operator.register_correlation_link``), else the plain id."""
    url = correlation_url(correlation_id) if correlation_id else None
    if url is None:
        return correlation_id or "-"
    return format_html('<a class="ops-mono" href="{}">{}</a>', url, correlation_id)
