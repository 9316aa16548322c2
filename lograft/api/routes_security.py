"""Public endpoints for the security metadata: ACLs, users (SCRAM
credentials) and client quotas (issue 12).

    GET    /v1/acls            bindings matching a filter (query parameters)
    POST   /v1/acls            add bindings                    {"acls": [binding...]}
    DELETE /v1/acls            remove the bindings matching a filter
    GET    /v1/users           users and their mechanisms (never salts or keys)
    PUT    /v1/users/{user}    set a user's password           {"password", ...}
    DELETE /v1/users/{user}    remove a user's credentials (?mechanism=)
    GET    /v1/quotas          quotas, optionally of one user / client id
    POST   /v1/quotas          set and remove one entity's quotas

Changes go to the active controller, from any node, and are answered once this
node's metadata holds them (as admin changes are, routes_admin.py). Reads
come from this node's image. Who may call which is decided by the
authorization table (route_access.py), not here.

A password is hashed here, on the receiving node, in a thread (PBKDF2 takes
milliseconds: never on the event loop), at most
`[http] password_hashes_inflight_max` at once; only the resulting
`ScramCredential` (salt, iterations, StoredKey, ServerKey) goes to the
controller and into the metadata. No answer, error message or log line of
this module holds a password, a salt or a key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from lograft import typed
from lograft.api.request_shapes import AlterQuotas, CreateAcls, SetPassword, decode_body
from lograft.api.routes_admin import METADATA_CATCH_UP_TIMEOUT_MS
from lograft.api.routes_data import json_response
from lograft.api.services import ControllerCalls
from lograft.echo import clip
from lograft.errors import InvalidRequestError
from lograft.protocol import controller_wire as w
from lograft.quorum.metadata_store import MetadataStore
from lograft.quorum.raft.adapter import RaftAdapter
from lograft.quorum.security_records import acl_sort_key, entity_sort_key
from lograft.security.acl_filters import parse_acl_filter
from lograft.security.acls import check_printable
from lograft.security.passwords import (
    PASSWORD_BYTES_MAX,
    USER_NAME_CHARS_MAX,
    ScramCredential,
    ScramMechanism,
    make_credential,
)
from lograft.security.quotas import CLIENT_ID_CHARS_MAX, USER_CHARS_MAX

__all__ = ["PASSWORD_HASHES_INFLIGHT_DEFAULT", "PasswordHasher", "SecurityRoutes"]

PASSWORD_HASHES_INFLIGHT_DEFAULT = 2
# Query parameters a filter may have at most (the filter has 7 fields).
_QUERY_PARAMS_MAX = 16


class PasswordHasher:
    """PBKDF2 in threads, at most `inflight_max` at once; the rest wait.

    A request that gives up while its hash runs leaves the hash to finish in
    its slot, so abandoned requests cannot make more threads hash at once
    than the bound (as api/password_checks.py does for logins)."""

    def __init__(self, inflight_max: int = PASSWORD_HASHES_INFLIGHT_DEFAULT) -> None:
        if inflight_max < 1:
            raise ValueError(f"inflight_max must be >= 1, got {inflight_max}")
        self.inflight_max = inflight_max
        self._slots: asyncio.Semaphore | None = None
        self.hashed = 0  # hashes started (tests)

    async def credential(
        self, name: str, password: str, mechanism: ScramMechanism, iterations: int
    ) -> ScramCredential:
        if self._slots is None:  # made on the loop that uses it
            self._slots = asyncio.Semaphore(self.inflight_max)
        slots = self._slots
        await slots.acquire()
        self.hashed += 1
        try:
            job = asyncio.ensure_future(
                asyncio.to_thread(
                    make_credential, name, password, mechanism=mechanism, iterations=iterations
                )
            )
        except BaseException:
            slots.release()
            raise
        job.add_done_callback(lambda done: _release(slots, done))
        return await asyncio.shield(job)


def _release(slots: asyncio.Semaphore, done: asyncio.Future[ScramCredential]) -> None:
    slots.release()
    if not done.cancelled():
        done.exception()  # retrieved: an abandoned hash's failure is not an error


class SecurityRoutes:
    def __init__(
        self,
        *,
        store: MetadataStore,
        raft: RaftAdapter,
        controller: ControllerCalls,
        hasher: PasswordHasher | None = None,
        catch_up_timeout_ms: int = METADATA_CATCH_UP_TIMEOUT_MS,
    ) -> None:
        self.store = store
        self.raft = raft
        self.controller = controller
        self.hasher = hasher or PasswordHasher()
        self.catch_up_timeout_ms = catch_up_timeout_ms

    def add_to(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/v1/acls", self.list_acls)
        r.add_post("/v1/acls", self.create_acls)
        r.add_delete("/v1/acls", self.delete_acls)
        r.add_get("/v1/users", self.list_users)
        r.add_put("/v1/users/{user}", self.set_password)
        r.add_delete("/v1/users/{user}", self.delete_user)
        r.add_get("/v1/quotas", self.list_quotas)
        r.add_post("/v1/quotas", self.alter_quotas)

    async def _change(self, name: str, request: typed.Record) -> dict[str, Any]:
        """`request` to the controller; its answer once this node's metadata
        includes the change."""
        result: dict[str, Any] = await self.controller.call(name, w.body_of(request))
        offset = result.get("metadata_offset")
        if isinstance(offset, int):
            await self.raft.wait_for_offset(offset, self.catch_up_timeout_ms)
        return result

    # -- ACLs ------------------------------------------------------------------------------

    async def list_acls(self, request: web.Request) -> web.Response:
        acl_filter = parse_acl_filter(_query(request))
        found = sorted(
            (a for a in self.store.image.acls if acl_filter.matches(a)), key=acl_sort_key
        )
        return json_response({"acls": typed.to_builtins(found)})

    async def create_acls(self, request: web.Request) -> web.Response:
        body = decode_body(await request.read(), CreateAcls, empty=None)
        result = await self._change("create-acls", w.CreateAclsRequest(acls=body.acls))
        return json_response(result, 201)

    async def delete_acls(self, request: web.Request) -> web.Response:
        acl_filter = parse_acl_filter(_query(request))
        result = await self._change("delete-acls", w.DeleteAclsRequest(filter=acl_filter))
        return json_response(result)

    # -- users -----------------------------------------------------------------------------

    async def list_users(self, _request: web.Request) -> web.Response:
        users = self.store.image.scram_credentials
        return json_response(
            {
                "users": [
                    {
                        "name": name,
                        "mechanisms": [
                            {"mechanism": m.value, "iterations": users[name][m].iterations}
                            for m in sorted(users[name])
                        ],
                    }
                    for name in sorted(users)
                ]
            }
        )

    async def set_password(self, request: web.Request) -> web.Response:
        name = _user_name(request)
        body = decode_body(await request.read(), SetPassword, empty=None)
        _check_password(body.password)
        try:
            credential = await self.hasher.credential(
                name, body.password, body.mechanism, body.iterations
            )
        except ValueError as exc:
            # make_credential's messages name the rule, never the password.
            raise InvalidRequestError(f"password: {exc}", field="password") from None
        result = await self._change(
            "upsert-scram-credential", w.UpsertScramCredentialRequest(credential=credential)
        )
        return json_response(result)

    async def delete_user(self, request: web.Request) -> web.Response:
        name = _user_name(request)
        query = _query(request)
        unknown = sorted(set(query) - {"mechanism"})
        if unknown:
            raise InvalidRequestError(
                f"unknown query parameter {clip(unknown[0])!r}; known: mechanism",
                field=clip(unknown[0]),
            )
        wire = w.request_of(
            {"name": name, **({"mechanism": query["mechanism"]} if "mechanism" in query else {})},
            w.DeleteScramCredentialRequest,
        )
        result = await self._change("delete-scram-credential", wire)
        return json_response(result)

    # -- quotas ----------------------------------------------------------------------------

    async def list_quotas(self, request: web.Request) -> web.Response:
        query = _query(request)
        unknown = sorted(set(query) - {"user", "client_id"})
        if unknown:
            raise InvalidRequestError(
                f"unknown query parameter {clip(unknown[0])!r}; known: client_id, user",
                field=clip(unknown[0]),
            )
        user = _bounded(query, "user", USER_CHARS_MAX)
        client_id = _bounded(query, "client_id", CLIENT_ID_CHARS_MAX)
        quotas = self.store.image.client_quotas
        shown = [
            {
                "entity": typed.to_builtins(entity),
                "values": {key.value: value for key, value in sorted(quotas[entity].items())},
            }
            for entity in sorted(quotas, key=entity_sort_key)
            if (user is None or entity.user == user)
            and (client_id is None or entity.client_id == client_id)
        ]
        return json_response({"quotas": shown})

    async def alter_quotas(self, request: web.Request) -> web.Response:
        body = decode_body(await request.read(), AlterQuotas, empty=None)
        wire = w.AlterClientQuotasRequest(
            entity=body.entity, values=dict(body.values), remove=list(body.remove)
        )
        result = await self._change("alter-client-quotas", wire)
        return json_response(result)


def _query(request: web.Request) -> dict[str, str]:
    """The query parameters as a dict; a repeated one is refused (a filter
    field has one value)."""
    params = request.query
    if len(params) > _QUERY_PARAMS_MAX:
        raise InvalidRequestError(f"more than {_QUERY_PARAMS_MAX} query parameters")
    out: dict[str, str] = {}
    for key, value in params.items():
        if key in out:
            raise InvalidRequestError(
                f"query parameter {clip(key)!r} is given twice", field=clip(key)
            )
        out[key] = value
    return out


def _bounded(query: Mapping[str, str], key: str, chars_max: int) -> str | None:
    value = query.get(key)
    if value is None:
        return None
    if not value or len(value) > chars_max:
        raise InvalidRequestError(f"{key}: 1 to {chars_max} characters", field=key)
    return value


def _user_name(request: web.Request) -> str:
    name = request.match_info["user"]
    if not name or len(name) > USER_NAME_CHARS_MAX:
        raise InvalidRequestError(
            f"user: a user name has 1 to {USER_NAME_CHARS_MAX} characters", field="user"
        )
    try:
        check_printable("user", name)
    except ValueError as exc:
        raise InvalidRequestError(str(exc), field="user") from None
    return name


def _check_password(password: str) -> None:
    """Bounds checked before any hashing; the message never repeats the password."""
    if not password:
        raise InvalidRequestError("password: must not be empty", field="password")
    try:
        size = len(password.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidRequestError("password: not valid Unicode text", field="password") from None
    if size > PASSWORD_BYTES_MAX:
        raise InvalidRequestError(
            f"password: at most {PASSWORD_BYTES_MAX} bytes (UTF-8)", field="password"
        )
