"""``/favicon.ico``: browsers ask for it on every page; a 404 each time fills the logs.

A 16×16 icon drawn here (a blue square with a white bar, PNG inside an ICO), so the tree carries
no binary file. Cached for a day.
"""

import struct
import zlib

from django.http import HttpResponse
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe

SIZE = 16
BLUE, WHITE = (0x15, 0x65, 0xC0, 0xFF), (0xFF, 0xFF, 0xFF, 0xFF)


def _png(pixels: list[list[tuple[int, int, int, int]]]) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(channel for pixel in row for channel in pixel) for row in pixels)
    header = struct.pack(">IIBBBBB", SIZE, SIZE, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _ico(png: bytes) -> bytes:
    """One image, stored as PNG (every browser reads those since Windows Vista's ICO format)."""
    directory = struct.pack("<HHH", 0, 1, 1)
    entry = struct.pack("<BBBBHHII", SIZE, SIZE, 0, 0, 1, 32, len(png), len(directory) + 16)
    return directory + entry + png


ICON = _ico(_png([[WHITE if 6 <= y <= 9 and 3 <= x <= 12 else BLUE for x in range(SIZE)] for y in range(SIZE)]))


@require_safe
@cache_control(max_age=86400, public=True)
def favicon_view(request):
    return HttpResponse(ICON, content_type="image/x-icon")
