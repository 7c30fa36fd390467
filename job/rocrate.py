"""data/ro-crate-metadata.json for a run's payload: the job's side of bundle.views.crate, which
renders the crate (the same code the verifier renders it with).

This module takes the payload's records and digests as written and states who publishes the
bundle, under which licence and by whom it was written (Publication, validated here, one sentence
per mistake); the crate states it on its root, and the signed predicate restates it
(bundle.predicate.restated_predicate). Write the crate last, after every other file in data/:
it describes them all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bundle.canonical import dumps
from bundle.crate_terms import DESCRIPTOR, FINGERPRINT_PROPERTY
from bundle.views import crate as view
from bundle.views.crate import FileFacts
from job import __version__
from job.errors import JobError

__all__ = ["CRATE", "DEFAULT_LICENSE", "DEFAULT_PUBLISHER", "FINGERPRINT_PROPERTY", "Party", "Publication",
           "crate_bytes", "crate_metadata"]

CRATE = DESCRIPTOR
"""The crate's name inside data/."""

DEFAULT_LICENSE = "https://spdx.org/licenses/CC-BY-4.0"
DEFAULT_PUBLISHER = f"calibration-runs <{view.SOFTWARE_URL}>"
_URL = re.compile(r"https?://[^\s/<>]+/[^\s<>]*")
_PARTY = re.compile(r"(?P<name>[^<>]+?)(?: <(?P<id>[^<>]+)>)?")
_EMAIL = re.compile(r"[^\s@<>]+@[^\s@<>]+\.[^\s@<>]+")
_NAME_MAX = 200


@dataclass(frozen=True)
class Party:
    """A publisher or an author: a name and, when known, an identifying URL (ROR for an
    organisation, ORCID for a person, or a home page)."""

    name: str
    id: str | None = None

    @classmethod
    def parse(cls, option: str, text: str) -> Party:
        """`NAME` or `NAME <URL>` (as git writes `Name <email>`); JobError when malformed."""
        m = _PARTY.fullmatch(text)
        name = m.group("name") if m else ""
        if not m or name != name.strip() or len(name) > _NAME_MAX or not name.isprintable() \
                or (m.group("id") is not None and not _URL.fullmatch(m.group("id"))):
            raise JobError(f"{option} {text[:80]!r} is not `NAME` or `NAME <URL>`; pass e.g. "
                           f"{option} 'Ada Lovelace <https://orcid.org/0000-0002-1825-0097>'.")
        return cls(name, m.group("id"))

    def record(self) -> dict[str, str | None]:
        """{"name", "id"}: the party as the crate and the signed predicate state it."""
        return {"name": self.name, "id": self.id}


DEFAULT_PUBLISHER_PARTY = Party.parse("--publisher", DEFAULT_PUBLISHER)


@dataclass(frozen=True)
class Publication:
    """Under which licence a bundle is published, by whom, who wrote it and whom to contact: the
    root's `license`, `publisher` (with `contactPoint`) and `author` (affiliated with the
    publisher when it is an organisation). Invalid values raise JobError, one sentence for the
    user. The crate meets RO-Crate's recommendations when the publisher has a ROR or ORCID
    identifier, a contact is given and every author has an ORCID."""

    license: str = DEFAULT_LICENSE  # an absolute http(s) URL, ideally SPDX's
    publisher: Party = DEFAULT_PUBLISHER_PARTY
    authors: tuple[Party, ...] = ()  # in the order given; none is stated when empty
    contact: str | None = None  # the publisher's e-mail address

    def __post_init__(self) -> None:
        if not _URL.fullmatch(self.license):
            raise JobError(f"--license {self.license[:80]!r} is not an absolute http(s) URL; pass the "
                           f"licence's SPDX URL, e.g. {DEFAULT_LICENSE}.")
        if self.contact is not None and not _EMAIL.fullmatch(self.contact):
            raise JobError(f"--contact {self.contact[:80]!r} is not an e-mail address; pass one like "
                           "calibration@example.org.")
        names = {p.id: p.name for p in (self.publisher, *self.authors) if p.id is not None}
        for party in (self.publisher, *self.authors):
            if party.id is not None and names[party.id] != party.name:
                raise JobError(f"{party.id} is given with two names ({names[party.id]!r} and "
                               f"{party.name!r}); give one identifier one name.")

    def record(self) -> dict[str, Any]:
        """The publication in the signed predicate's shape, which bundle.views.crate renders."""
        return {"license": self.license, "publisher": self.publisher.record(),
                "authors": [a.record() for a in self.authors], "contact": self.contact}


def crate_metadata(files: Mapping[str, FileFacts], *, protocol: Mapping[str, Any], resources: Mapping[str, Any],
                   environment: Mapping[str, Any], signer_fingerprint: str | None, date_published: str,
                   publication: Publication | None = None) -> dict[str, Any]:
    """The crate of the payload whose files (names inside data/) have the sizes and digests
    `files` (the run's job.publishing.ledger entries as written), describing every file except the crate
    itself and environment.json; protocol, resources, environment: those records as written.

    date_published: YYYY-MM-DD (use job.publishing.dates.bagging_date() so that it equals Bagging-Date).
    publication: licence, publisher and authors (default: Publication())."""
    return view.crate_document(
        files, protocol=protocol, resources=resources, environment=environment,
        signer_fingerprint=signer_fingerprint, date_published=date_published,
        publication=(publication or Publication()).record(), software_version=__version__)


def crate_bytes(files: Mapping[str, FileFacts], *, protocol: Mapping[str, Any], resources: Mapping[str, Any],
                environment: Mapping[str, Any], signer_fingerprint: str | None, date_published: str,
                publication: Publication | None = None) -> bytes:
    """Canonical JSON bytes of crate_metadata(...), for Artifacts.write_bytes(CRATE, ...)."""
    return dumps(crate_metadata(files, protocol=protocol, resources=resources, environment=environment,
                                signer_fingerprint=signer_fingerprint, date_published=date_published,
                                publication=publication))
