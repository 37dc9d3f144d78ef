"""Locks on paths, globs and named resources, owned by broker-issued principals."""
