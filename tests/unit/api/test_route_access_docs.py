"""docs/api.md's Authorization table names exactly the routes the access
table decides (internal ones aside): a route added or renamed without its row
in the docs, or a row for a route that is gone, fails here."""

from __future__ import annotations

import re
from pathlib import Path

from lograft.api.route_access import ROUTE_ACCESS, Kind

API_DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"
# A route as the docs write it: `METHOD /path` (a leading `...` abbreviates
# the path's start, which must then name exactly one route).
_ROUTE = re.compile(r"`(GET|POST|PUT|DELETE|PATCH) ([^`]+)`")


def _plain(path: str) -> str:
    """`{group:[^/]+}` as the docs write it: `{group}`."""
    return re.sub(r"\{(\w+)(:[^}]*)?\}", r"{\1}", path)


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_the_authorization_table_in_the_docs_names_every_decided_route() -> None:
    decided = {
        (method, _plain(path))
        for (method, path), access in ROUTE_ACCESS.items()
        if access.kind is not Kind.INTERNAL
    }
    documented: set[tuple[str, str]] = set()
    unknown = []
    for method, path in _ROUTE.findall(_section(API_DOC.read_text(), "Authorization")):
        if path.startswith("..."):
            hits = [r for r in decided if r[0] == method and r[1].endswith(path[3:])]
        else:
            hits = [r for r in decided if r == (method, path)]
        if len(hits) != 1:
            unknown.append(f"{method} {path}")
        documented.update(hits)
    assert unknown == [], f"docs/api.md names routes the access table does not: {unknown}"
    missing = sorted(decided - documented)
    assert missing == [], f"routes missing from docs/api.md's Authorization table: {missing}"
