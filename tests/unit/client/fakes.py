"""A scripted in-memory transport for client unit tests (no sockets).

`ScriptedTransport(handler)` calls `handler(Call)` for every request; the
handler returns an HttpResponse or raises NetworkError. Every call is kept
in `calls`, so tests can assert where each request went and with what bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from lograft.client.transport import HttpResponse


@dataclass(frozen=True)
class Call:
    method: str
    url: str
    params: Mapping[str, str] | None
    data: bytes | None
    headers: Mapping[str, str] | None
    body_max_bytes: int | None = None

    @property
    def base(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def path(self) -> str:
        return urlsplit(self.url).path


def json_response(call: Call, body: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(status, orjson.dumps(body), {}, call.url)


def error_response(
    call: Call, status: int, code: str, retriable: bool, **details: Any
) -> HttpResponse:
    body = {"error": {"code": code, "message": f"{code} (scripted)", "retriable": retriable}}
    if details:
        body["error"]["details"] = details
    return json_response(call, body, status)


def topic_doc(name: str, leaders: list[int]) -> dict[str, Any]:
    return {
        "name": name,
        "partitions": [
            {
                "partition": i,
                "leader": leader,
                "leader_epoch": 0,
                "replicas": [leader],
                "isr": [leader],
            }
            for i, leader in enumerate(leaders)
        ],
    }


def brokers_doc(urls: Mapping[int, str]) -> dict[str, Any]:
    return {
        "brokers": [
            {"id": i, "fenced": False, "endpoints": {"http": url}} for i, url in urls.items()
        ]
    }


class ScriptedTransport:
    def __init__(self, handler: Callable[[Call], HttpResponse]) -> None:
        self.handler = handler
        self.calls: list[Call] = []
        self.closed = False

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_ms: int,
        body_max_bytes: int | None = None,
    ) -> HttpResponse:
        call = Call(method, url, params, data, headers, body_max_bytes)
        self.calls.append(call)
        return self.handler(call)

    async def close(self) -> None:
        self.closed = True

    def to(self, suffix: str) -> list[Call]:
        return [c for c in self.calls if c.path.endswith(suffix)]
