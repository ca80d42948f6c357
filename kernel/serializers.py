"""Strict input serializers: no silent conversions, no silently ignored fields.

DRF drops fields a serializer does not declare; a client that sends ``"price": "0.01"`` would
believe it set something. Like Stripe, the API refuses them, naming each one.
"""

from collections.abc import Mapping

from rest_framework import serializers

UNKNOWN_FIELD = "Unknown field."


class StrictCharField(serializers.CharField):
    """A string, and only a string (no silent conversion of numbers)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
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
