"""The writer of the format: the ledger of payload files as written, the BagIt seal with the signed
statement, atomic publishing, the deterministic archive, co-signing, reproduction attestations,
the sweep's signed records, signing keys, the dates a bundle states, and the keygen, archive and
cosign commands of `python -m job`. The definitions it writes by are the format core's (bundle/)."""
