"""ONNX Runtime keeps a telemetry database under $HOME/.cache unless told not to."""

import os

os.environ["ORT_DISABLE_TELEMETRY"] = "1"
