"""Many changed rows of one model written at once, through the ORM."""

from collections.abc import Iterable

from django.db.models import Model


def bulk_save(objects: Iterable[Model], fields: list[str]) -> int:
    """``bulk_update`` of ``fields`` of ``objects`` (rows of one model), as ``save(update_fields=...)``
    would write each: an ``auto_now`` field among ``fields`` is set to now first, on the object too
    (``bulk_update`` writes the values as they are). The number of rows updated."""
    objects = list(objects)
    if not objects:
        return 0
    model = type(objects[0])
    if others := {type(obj).__name__ for obj in objects if type(obj) is not model}:
        raise TypeError(f"bulk_save() takes rows of one model: {model.__name__}, not {', '.join(sorted(others))}")
    for name in fields:
        field = model._meta.get_field(name)
        for obj in objects:
            field.pre_save(obj, add=False)  # auto_now: now; any other field: its value, unchanged
    # The base manager, as save() uses: a default manager's filter skips no row.
    return model._base_manager.bulk_update(objects, fields)
