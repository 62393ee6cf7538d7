"""The analyst SQL surface: SQL:2011-style period clauses rewritten onto the analyst views
(period), the allow-list every query must pass (policy), and the read-only runner (runner)."""
