"""The bundle format: canonical JSON, schemas, keys, DSSE, BagIt tag files, atomic output, archives.

This package never imports torch, job/ or verify/; verify/ depends on it. See FORMAT.md.
"""
