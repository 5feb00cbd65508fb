"""The API's routers, mounted under ``/api/v1`` in this order."""

from caramba.api.routes import assets, manifests, runs, system

ROUTERS = [system.router, manifests.router, runs.router, assets.router]
