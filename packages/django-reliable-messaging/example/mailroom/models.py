from django.db import models


class Letter(models.Model):
    greeting_id = models.UUIDField(unique=True)
    to = models.CharField(max_length=100)
    text = models.TextField()

    def __str__(self) -> str:
        return f"to {self.to}"
