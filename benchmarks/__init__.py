"""caramba benchmarks: workloads side by side with NumPy, JAX, PyTorch and ONNX Runtime."""
