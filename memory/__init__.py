"""The shared memory: an apsw FTS5 store of claims whose trust needs independent witnesses."""
