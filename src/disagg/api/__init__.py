"""The REST API of the controller (FastAPI): `create_app(controller)`."""

from disagg.api.app import create_app

__all__ = ["create_app"]
