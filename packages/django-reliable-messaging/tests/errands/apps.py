from django.apps import AppConfig


class ErrandsConfig(AppConfig):
    name = "errands"

    def ready(self) -> None:
        from reliable_messaging import sagas

        from errands.saga import ERRAND_V1, ERRAND_V2

        sagas.register(ERRAND_V1, ERRAND_V2)
