"""Search f(α) = χ(ρ(φ(α))): candidates (candidates.py) -> rerank (rerank.py) -> context (context.py).

config.py holds the knobs, filters and named recipes; types.py the typed results.
"""
