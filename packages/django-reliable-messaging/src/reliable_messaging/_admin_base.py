"""The one read-only ModelAdmin: the tables it shows change only through their context's services
(which also publish the events) or the delivery machinery, never by hand."""

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """View permission shows everything; add, change and delete are never offered."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
