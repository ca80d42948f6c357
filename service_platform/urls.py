"""The URLs of this deployment: each hosted context's API (its declared ``urls``) under ``api/``
with the API's docs; the admin, health probes and metrics everywhere, each about this
deployment's database."""

from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from reliable_messaging.hosting import hosted

from operations.overview import overview_view
from service_platform.errors import allow_methods
from service_platform.favicon import favicon_view
from service_platform.health import HealthApi, ReadinessApi
from service_platform.metrics import metrics_view

admin.site.site_header = "Saga shop operations"
admin.site.site_title = "Saga shop"
admin.site.index_title = f"Contexts hosted here: {', '.join(settings.CONTEXTS)}"
admin.site.site_url = "/admin/overview/"  # "View site": there is no site at /, the overview is the console's

urlpatterns = [
    # Before admin.site.urls, whose catch-all would take it.
    path("admin/overview/", admin.site.admin_view(overview_view), name="admin-overview"),
    path("admin/", admin.site.urls),
    path("healthz", HealthApi.as_view(), name="healthz"),
    path("readyz", ReadinessApi.as_view(), name="readyz"),
    path("metrics", allow_methods("GET", "HEAD")(metrics_view), name="metrics"),
    path("favicon.ico", favicon_view, name="favicon"),
]

apis = [d.urls for d in hosted() if d.urls]
# "/" is no page of its own: the API's docs where the API is served, else the operators' console.
urlpatterns.append(path("", RedirectView.as_view(url="/api/docs/" if apis else "/admin/overview/"), name="home"))
if apis:
    urlpatterns += [
        path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
        # Its init script served apart from the page, so the CSP needs no inline script.
        path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
        *(path("api/", include(module)) for module in apis),
    ]

# Errors Django raises before or outside a view: JSON, except on the admin (service_platform/errors.py).
handler400 = "service_platform.errors.bad_request"
handler403 = "service_platform.errors.permission_denied"
handler404 = "service_platform.errors.page_not_found"
handler500 = "service_platform.errors.server_error"
