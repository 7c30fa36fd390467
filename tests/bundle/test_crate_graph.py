"""bundle.crate_graph: the publication a crate's root states, read one way for the writer (which
signs it) and the verifier (which requires the crate to state what was signed)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bundle.crate_graph import entities, refs, stated_publication, types_of
from bundle.crate_terms import NO_LICENSE, ROOT
from bundle.errors import CrateError
from verify import crate
from verify.result import Failed

ORCID = "https://orcid.org/0000-0002-1825-0097"
CRATE: dict[str, Any] = {"@graph": [
    {"@id": ROOT, "@type": "Dataset", "license": {"@id": "https://spdx.org/licenses/CC-BY-4.0"},
     "publisher": {"@id": "#publisher"}, "author": [{"@id": ORCID}, {"@id": "#author-2"}]},
    {"@id": "#publisher", "@type": "Organization", "name": "A lab", "contactPoint": {"@id": "#contact"}},
    {"@id": "#contact", "@type": "ContactPoint", "email": "lab@example.org"},
    {"@id": ORCID, "@type": "Person", "name": "Ada"},
    {"@id": "#author-2", "@type": ["Person"], "name": "Bo"},
]}


def test_the_root_statement_in_the_predicates_shape() -> None:
    assert stated_publication(entities(CRATE)) == {
        "license": "https://spdx.org/licenses/CC-BY-4.0",
        "publisher": {"name": "A lab", "id": None},
        "authors": [{"name": "Ada", "id": ORCID}, {"name": "Bo", "id": None}],
        "contact": "lab@example.org"}


def test_a_crate_that_states_nothing_gives_nulls() -> None:
    bare = {"@graph": [{"@id": ROOT, "@type": "Dataset", "license": {"@id": NO_LICENSE}}]}
    assert stated_publication(entities(bare)) == {"license": None, "publisher": None, "authors": [],
                                                  "contact": None}


def test_references_and_types() -> None:
    assert refs({"@id": "a"}) == ["a"] and refs([{"@id": "a"}, {"@id": "b"}]) == ["a", "b"]
    assert refs({"@id": "a", "name": "x"}) == [] and refs("a") == [] and refs(None) == []
    assert types_of({"@type": "Person"}) == ["Person"] and types_of({}) == []


def _edited(edit: Any) -> dict[str, Any]:
    doc = copy.deepcopy(CRATE)
    edit({e["@id"]: e for e in doc["@graph"]})
    return doc


@pytest.mark.parametrize(("edit", "ident", "words"), [
    (lambda g: g[ROOT].update(publisher=[{"@id": "#publisher"}, {"@id": ORCID}]), ROOT, "more than one"),
    (lambda g: g["#contact"].update({"@type": "Thing"}), "#publisher", "contactPoint"),
    (lambda g: g[ORCID].pop("name"), ORCID, "Person or Organization"),
    (lambda g: g["#author-2"].update({"@type": "Thing"}), "#author-2", "Person or Organization"),
])
def test_a_graph_the_format_never_writes_is_refused(edit: Any, ident: str, words: str) -> None:
    graph = entities(_edited(edit))
    with pytest.raises(CrateError, match=words) as caught:
        stated_publication(graph)
    assert caught.value.ident == ident
    with pytest.raises(Failed, match=words):  # the verifier reports the same sentence as a failed check
        crate.stated_publication(graph)  # type: ignore[arg-type]
