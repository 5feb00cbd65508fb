"""caramba.cluster: nodes, their hardware profiles (backends, memory, measured GFLOP/s) and health."""

from caramba.cluster.profile import BackendInfo, HardwareProfile, backend_infos, backend_resources, probe
from caramba.cluster.registry import NodeInfo, NodeRegistry, UnknownNode
