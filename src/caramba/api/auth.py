"""Token auth: every state-changing call carries the configured secret.

Every route that is not a GET takes the token (``dependencies=[AUTH]``), including those that
only compute (validate, compile): one rule that is easy to check, and no anonymous caller can
make the server build graphs or claim a device. Clients send ``Authorization: Bearer <token>`` (or ``X-Caramba-Token: <token>``). Tokens are
compared in constant time. A server with no token configured refuses every state-changing
call rather than accepting anonymous ones; ``caramba serve`` generates a token when none is
set and prints it.
"""

from __future__ import annotations

import hmac
import secrets

from fastapi import HTTPException, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

_bearer = HTTPBearer(auto_error=False, description="the server's api_token")
_header = APIKeyHeader(name="X-Caramba-Token", auto_error=False, description="the server's api_token")


def new_token() -> str:
    return secrets.token_urlsafe(24)


def token_matches(expected: str, given: str | None) -> bool:
    if not expected or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def require_token(
    request: Request,
    bearer: HTTPAuthorizationCredentials | None = Security(_bearer),
    header: str | None = Security(_header),
) -> None:
    """Dependency for every state-changing route."""
    expected: str = request.app.state.caramba.token
    if not expected:
        raise HTTPException(
            status_code=401,
            detail="this server has no api_token configured, so it accepts no state-changing calls; "
            "set CARAMBA_API_TOKEN (or api_token in caramba.yml) and restart",
            headers={"WWW-Authenticate": "Bearer"},
        )
    given = bearer.credentials if bearer is not None else header
    if not token_matches(expected, given):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong token: send 'Authorization: Bearer <api_token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )


AUTH = Security(require_token)
