"""The cluster secret: what a node shows another node's internal endpoints.

Internal endpoints (`/internal/...`) answer only callers that present the
cluster secret in `X-Lograft-Cluster-Secret` (never client credentials: an
Authorization header is not looked at). Refused: 401
SASL_AUTHENTICATION_FAILED, details.reason `missing_credentials` (no
secret) or `bad_credentials` (a wrong one).
"""

from __future__ import annotations

import hmac

from aiohttp import web

from lograft.api.auth_failure_log import AuthFailureLog
from lograft.api.authentication import peer_host, refusal
from lograft.api.caller import CALLER_KEY, Caller, How
from lograft.security.failures import AuthenticationFailed, AuthFailure

__all__ = ["CLUSTER_PRINCIPAL", "SECRET_CHALLENGE", "SECRET_HEADER", "check_cluster_secret"]

SECRET_HEADER = "X-Lograft-Cluster-Secret"
# The principal of another node calling an internal endpoint with the
# cluster secret (How.CLUSTER; no credential can claim it, the How tells).
CLUSTER_PRINCIPAL = "User:lograft-cluster"
# The challenge of an internal endpoint's 401.
SECRET_CHALLENGE = 'Cluster-Secret realm="lograft-internal"'


def check_cluster_secret(
    request: web.Request, secret: str, failures: AuthFailureLog
) -> web.Response | None:
    """An internal request's secret: its caller is the cluster, or the 401."""
    given = request.headers.get(SECRET_HEADER, "")
    if not secret or not hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), secret.encode()
    ):
        failure = AuthenticationFailed(
            AuthFailure.BAD_CREDENTIALS if given else AuthFailure.MISSING,
            f"internal endpoint: send the cluster secret in {SECRET_HEADER}",
        )
        failures.failure(
            failure.reason.value,
            peer_host(request),
            failure.message,
            where=f"{request.method} {request.path}",
        )
        return refusal(failure, (SECRET_CHALLENGE,))
    request[CALLER_KEY] = Caller(CLUSTER_PRINCIPAL, peer_host(request), "", How.CLUSTER)
    return None
