"""The API's routers, mounted under ``/api/v1`` in this order."""

from caramba.api.routes import assets, generate, manifests, notary, runs, system

ROUTERS = [system.router, manifests.router, runs.router, notary.router, assets.router, generate.router]
