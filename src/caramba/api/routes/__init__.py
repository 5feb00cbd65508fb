"""The API's routers, mounted under ``/api/v1`` in this order."""

from caramba.api.routes import assets, manifests, system

ROUTERS = [system.router, manifests.router, assets.router]
