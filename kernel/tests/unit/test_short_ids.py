"""The admin lists' ``short`` filter shortens ids, never a SKU in the same column."""

import uuid

import pytest

from kernel.templatetags.ops import short

ID = "0196f0a2-7c1e-7b3a-9d4e-2f6a8b1c3d5e"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (ID, f'<span class="ops-mono nowrap" title="{ID}">…8b1c3d5e</span>'),
        (uuid.UUID(ID), f'<span class="ops-mono nowrap" title="{ID}">…8b1c3d5e</span>'),
        ("LIMITED-PRINT", "LIMITED-PRINT"),
        ("S" * 64, "S" * 64),
        ("x" * 65, f'<span class="ops-mono nowrap" title="{"x" * 65}">…xxxxxxxx</span>'),
        ("", "-"),
        (None, "-"),
    ],
)
def test_only_ids_are_shortened(value, shown):
    assert str(short(value)) == shown
