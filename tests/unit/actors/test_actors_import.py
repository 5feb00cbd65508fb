"""The actor, cluster and orchestrator packages stay light: Ray and boto3 load only when used."""

import subprocess
import sys


def test_importing_actors_pulls_neither_ray_nor_boto3():
    code = (
        "import sys, caramba.actors, caramba.actors.services, caramba.orchestrator.run, caramba.cluster, caramba.store\n"
        "print(','.join(m for m in ('ray', 'boto3', 'botocore', 'moto') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
