"""Reading data/ro-crate-metadata.json's graph as bundle/FORMAT.md defines it: an entity's types,
the @ids a property references, and the publication the root states.

One reading for the writer, which signs the publication its crate states (job.publishing.statement), and
the verifier, which requires the crate to state what was signed (verify/crate.py): pure functions
of a parsed graph, raising CrateError (one sentence) on a graph this format never writes. Whether
the crate as a whole is well formed is the verifier's own check (verify.crate.parse)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bundle.crate_terms import NO_LICENSE, ROOT
from bundle.errors import CrateError

Graph = Mapping[str, Mapping[str, Any]]
"""The crate's entities by @id."""


def entities(crate: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """@id -> entity of a crate document's @graph (the writer's own crate; the verifier builds its
    graph with its structural checks, verify.crate.parse)."""
    return {entity["@id"]: entity for entity in crate["@graph"]}


def types_of(entity: Mapping[str, Any]) -> list[str]:
    """The entity's @type as a list ([] when it has none)."""
    t = entity.get("@type")
    return [t] if isinstance(t, str) else list(t) if isinstance(t, list) else []


def refs(value: Any) -> list[str]:
    """The @ids of a property that holds one reference or a list of them ([] for anything else)."""
    items = value if isinstance(value, list) else [value]
    return [v["@id"] for v in items if isinstance(v, dict) and set(v) == {"@id"}
            and isinstance(v["@id"], str)]


def _party(graph: Graph, ident: str) -> dict[str, Any]:
    entity = graph.get(ident, {})
    if not {"Person", "Organization"} & set(types_of(entity)) or not isinstance(entity.get("name"), str):
        raise CrateError(f"the crate's {ident!r} is not a Person or Organization with a name.", ident=ident)
    return {"name": entity["name"], "id": None if ident.startswith("#") else ident}


def stated_publication(graph: Graph) -> dict[str, Any]:
    """The licence, publisher, authors and the publisher's contact e-mail the root states, in
    the predicate's shape (FORMAT.md "Predicate"): null or empty where it states none."""
    root = graph[ROOT]
    licenses = [i for i in refs(root.get("license")) if i != NO_LICENSE]
    publishers = refs(root.get("publisher"))
    if len(licenses) > 1 or len(publishers) > 1:
        raise CrateError("the crate's root names more than one license or publisher.", ident=ROOT)
    contact = None
    if publishers:
        points = refs(graph.get(publishers[0], {}).get("contactPoint"))
        emails = [graph.get(i, {}).get("email") for i in points
                  if "ContactPoint" in types_of(graph.get(i, {}))]
        if len(emails) != len(points) or len(emails) > 1:
            raise CrateError("the publisher's contactPoint is not one ContactPoint entity with an email.",
                             ident=publishers[0])
        contact = emails[0] if emails else None
    return {"license": licenses[0] if licenses else None,
            "publisher": _party(graph, publishers[0]) if publishers else None,
            "authors": [_party(graph, i) for i in refs(root.get("author"))],
            "contact": contact}
