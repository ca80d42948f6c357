"""The one read-only ModelAdmin: the tables it shows change only through their context's services
(which also publish the events) or the delivery machinery, never by hand."""

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[Any]  # generic in django-stubs only: not subscriptable at run time
else:
    ModelAdmin = admin.ModelAdmin


class ReadOnlyAdmin(ModelAdmin):
    """View permission shows everything; add, change and delete are never offered."""

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False
