"""Evaluation helpers: benchmark readers (LoCoMo, LongMemEval), metric arithmetic and
non-graph retrieval baselines (BM25, dense) to compare pgmemory against."""
