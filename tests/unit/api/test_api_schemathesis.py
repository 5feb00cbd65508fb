"""Property-based tests against our own OpenAPI spec (schemathesis): no input, valid or not,
makes the server answer 500, and answers match the documented status codes and schemas.

Bounded: a fixed number of examples per operation, no deadline, derandomized. The app lives
for the module, around a temporary store that is removed afterwards."""

from __future__ import annotations

import atexit
import shutil
import tempfile

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis (test extra) is not installed")
pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
from hypothesis import HealthCheck, settings  # noqa: E402

from caramba.api import create_app  # noqa: E402
from caramba.config import Settings  # noqa: E402

MAX_EXAMPLES = 25
TOKEN = "schemathesis-token"
_STORE = tempfile.mkdtemp(prefix="caramba-schemathesis-")
atexit.register(shutil.rmtree, _STORE, True)  # also when this module's tests are deselected
# A body limit above the largest schema-valid body, so that oversized fields meet the schema's
# 422 rather than the 413 of the size limit (which test_api_limits covers).
APP = create_app(Settings(store=_STORE, api_token=TOKEN), max_body=64 << 20, hosts=["testserver"])
schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    APP.state.caramba.close()
    shutil.rmtree(_STORE, ignore_errors=True)


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_spec(case):
    # Every check but "schema-valid data is accepted": a manifest is YAML inside a JSON string,
    # and a schema-valid string is rarely a valid manifest (those get 422 with locations).
    case.call_and_validate(
        headers={"Authorization": f"Bearer {TOKEN}"},
        excluded_checks=[schemathesis.checks.positive_data_acceptance],
    )
