"""The API's routers, mounted under ``/api/v1`` in this order."""

from caramba.api.routes import assets, compare, generate, manifests, notary, runs, system
from caramba.api.routes import export as export_routes

ROUTERS = [system.router, manifests.router, runs.router, notary.router, assets.router, generate.router]
ROUTERS.append(compare.router)  # issue 21: compare, tag, annotate, delete runs
ROUTERS.append(export_routes.router)  # issue 21: download a run's model as ONNX or safetensors
