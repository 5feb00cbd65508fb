"""Moved: the run engine lives in ``caramba.run`` (``manifest`` is the document -> IR front end).

Kept so ``from caramba.manifest.experiment import run_experiment`` goes on working.
"""

from caramba.run import *  # noqa: F403
from caramba.run import __all__  # noqa: F401
from caramba.run.engine import _plots  # noqa: F401
