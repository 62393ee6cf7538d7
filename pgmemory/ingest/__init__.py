"""Ingestion: episode -> entities, facts, invalidations, all written in one transaction.

Steps, one module each: episode (validate), resolve_entities, resolve_facts
(dedupe + contradictions), invalidation (the temporal rules), apply (the one
write), pipeline (orchestration), delete (episode deletion, group erasure), communities
(re-detection and summaries between episodes).
"""
