"""A JSON parser with a size limit.

DRF's parser reads the request stream itself, so Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` never
applies to a JSON body. This one refuses a body over the view's ``max_body_bytes`` (default
``API_MAX_BODY_BYTES``) with ``413``: at once when ``Content-Length`` says so, otherwise after
reading one byte past the limit, never the whole body.
"""

import io

from django.conf import settings
from rest_framework.parsers import JSONParser

from kernel.exceptions import PayloadTooLarge


def body_limit(view) -> int:
    return getattr(view, "max_body_bytes", None) or settings.API_MAX_BODY_BYTES


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        limit = body_limit(parser_context.get("view"))
        declared = parser_context["request"].META.get("CONTENT_LENGTH") if "request" in parser_context else None
        if declared and str(declared).isdigit() and int(declared) > limit:
            raise PayloadTooLarge(limit)
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise PayloadTooLarge(limit)
        return super().parse(io.BytesIO(body), media_type, parser_context)
