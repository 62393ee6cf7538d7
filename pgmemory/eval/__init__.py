"""Evaluation: benchmark readers (LoCoMo, LongMemEval), metric arithmetic, non-graph retrieval
baselines (BM25, dense) and the `pgmemory eval` harness (ingest, retrieve, answer, judge, report)."""
