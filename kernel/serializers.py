"""Strict input serializers: no silent conversions, no silently ignored fields.

DRF drops fields a serializer does not declare; a client that sends ``"price": "0.01"`` would
believe it set something. Like Stripe, the API refuses them, naming each one.
"""

from collections.abc import Mapping

from rest_framework import serializers

UNKNOWN_FIELD = "Unknown field."


class StrictCharField(serializers.CharField):
    """A string, and only a string, taken verbatim: no silent conversion of numbers and no
    trimming (DRF trims by default, so ``" WIDGET"`` would have bought a ``WIDGET``).
    ``refuse_surrounding_whitespace`` refuses a value that begins or ends with whitespace
    instead of keeping it."""

    default_error_messages = {"surrounding_whitespace": "Must not begin or end with whitespace."}

    def __init__(self, *, refuse_surrounding_whitespace: bool = False, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.refuse_surrounding_whitespace = refuse_surrounding_whitespace

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if self.refuse_surrounding_whitespace and data != data.strip():
            self.fail("surrounding_whitespace")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An integer, and only an integer (no "2", 2.0 or true)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not declare, alongside the usual field errors."""

    def to_internal_value(self, data):
        unknown = sorted(set(data) - set(self.fields)) if isinstance(data, Mapping) else []
        errors = {name: [UNKNOWN_FIELD] for name in unknown}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **errors}) from None
            raise
        if errors:
            raise serializers.ValidationError(errors)
        return value
