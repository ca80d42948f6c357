"""The project's URLs plus the bench-only endpoint, outside the production URL space."""

from django.urls import path

from bench.benchapp.apis import BareInsertApi
from service_platform.urls import handler400, handler403, handler404, handler500  # noqa: F401 (the same error pages)
from service_platform.urls import urlpatterns as project_urlpatterns

urlpatterns = [path("bench/bare/", BareInsertApi.as_view(), name="bench-bare"), *project_urlpatterns]
