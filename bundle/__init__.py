"""The bundle format core, which the writer (job/) and the verifier (verify/) both import: layout
names, limits and caps, canonical JSON, the schemas registry, the DSSE `Envelope`, key
fingerprints, crate terms, the predicate's shape, the wording of warnings and verdicts, the one
bounded reader of a file a user names, stdout handling, and the views (bundle/views/).

It imports nothing else of the project (never job/, verify/ or torch), and it writes nothing: the
writer (ledger, seal, publish, archive, cosign, attestations, keys) is job/publishing/. See
FORMAT.md.
"""
