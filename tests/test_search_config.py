"""Recipes by name: validated once and reused, yet overrides are still checked on every call and a
recipe replaced in RECIPES is the one used from then on."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pgmemory.errors import InvalidInput
from pgmemory.search.config import RECIPES, resolve_config


def test_a_recipe_asked_twice_is_the_validated_recipe_both_times():
    for name in sorted(RECIPES):
        if RECIPES[name].reranker == "node_distance":
            continue  # needs a centre: refused without one (below)
        first, second = resolve_config(name), resolve_config(name)
        assert first == second == RECIPES[name].validate()
    assert resolve_config(None) == RECIPES["combined_hybrid_rrf"].validate()


@pytest.mark.parametrize("overrides, message", [
    (dict(candidates=0), "candidates"),
    (dict(kinds=("facts", "nodes")), "unknown search kind"),
    (dict(rrf_k=-1), "rrf_k"),
    (dict(reranker="magic"), "unknown reranker"),
])
def test_a_recipe_already_used_still_refuses_bad_overrides(overrides, message):
    resolve_config("edge_hybrid_rrf")
    with pytest.raises(InvalidInput, match=message):
        resolve_config("edge_hybrid_rrf", **overrides)
    assert resolve_config("edge_hybrid_rrf", candidates=7).candidates == 7
    assert resolve_config("edge_hybrid_rrf").candidates is None  # the override did not stick


def test_a_recipe_replaced_in_recipes_is_used_and_checked(monkeypatch):
    resolve_config("edge_hybrid_rrf")
    monkeypatch.setitem(RECIPES, "edge_hybrid_rrf", replace(RECIPES["edge_hybrid_rrf"], candidates=12))
    assert resolve_config("edge_hybrid_rrf").candidates == 12
    monkeypatch.setitem(RECIPES, "edge_hybrid_rrf", replace(RECIPES["edge_hybrid_rrf"], rrf_k=0))
    for _ in range(2):
        with pytest.raises(InvalidInput, match="rrf_k"):
            resolve_config("edge_hybrid_rrf")


def test_node_distance_without_a_centre_is_refused_every_time():
    for _ in range(2):
        with pytest.raises(InvalidInput, match="centre"):
            resolve_config("edge_node_distance")
