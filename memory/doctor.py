"""What ``conclave doctor`` says about the memory: which embedder, and whether it works here."""

from __future__ import annotations

from typing import Any

from memory import embedder


def report(database: Any) -> dict[str, Any]:
    """``conclave doctor``: the embedder the last broker here recorded (else the default), and whether it answers.

    Reads the state database read-only if there is one; embeds one sentence
    with the local model, or sends one to the HTTP endpoint (a request to the
    address the team file names, nowhere else).
    """
    import time
    from pathlib import Path

    config, source = embedder.EmbedderConfig(), "the default (no broker has recorded settings here)"
    path = Path(database)
    if path.exists():
        from memory import settings
        from store import database as store_database

        try:
            conn = store_database.connect(path, readonly=True)
            try:
                found = settings.recorded(conn)
            finally:
                conn.close()
        except Exception as exc:  # a store this conclave cannot read: say so, report the default
            source = f"the default (the state database could not be read: {exc})"
            found = None
        if found is not None:
            config, source = found.embedder, "recorded by the last broker on this state directory"
    out: dict[str, Any] = {"embedder": config.describe(), "source": source, "config": config.as_dict()}
    if not config.enabled:
        out.update(working=None, summary=f"embedder {config.describe()} -- {source}")
        return out
    try:
        model = embedder.make(config)
        assert model is not None
        start = time.perf_counter()
        model.embed(["conclave doctor checks the embedder"], "query")
        out.update(working=True, model=model.model, first_query_ms=round((time.perf_counter() - start) * 1000, 1))
        from memory import probe

        out["probe"] = probe.shipped(model.model) is not None
        trained = "the trained prefilter probe is on" if out["probe"] else f"the trained prefilter probe is off (its weights are for {probe.shipped_model()}, not this model)"
        status = f"works ({out['first_query_ms']} ms for a first query); {trained}"
    except embedder.EmbedderUnavailable as exc:
        out.update(working=False, error=str(exc))
        status = f"does not work here: {exc}"
    out["summary"] = f"embedder {config.describe()} -- {source}; {status}"
    return out
