"""Cross-validation of one search setting between conversations (leave one conversation out)."""
from __future__ import annotations

import pytest

from pgmemory.eval.crossval import choose, cross_validate, folds, main, report_lines
from pgmemory.eval.harness import load_conversations
from tests.test_eval_harness import IRREGULAR, irregular_copy


def table(**recalls: float) -> dict:
    return {float(v.replace("_", ".")[1:]): {"all": r, "multi-hop": r / 2} for v, r in recalls.items()}


def test_value_is_chosen_on_the_other_conversations_only():
    tables = {"a": table(v0_0=0.50, v0_5=0.60, v1_0=0.55),
              "b": table(v0_0=0.70, v0_5=0.70, v1_0=0.80),
              "c": table(v0_0=0.40, v0_5=0.45, v1_0=0.45)}
    assert choose([tables["b"]], base=0.0) == 1.0
    assert choose([tables["a"], tables["c"]], base=0.0) == 0.5
    # A tie keeps the base value, then the earlier one.
    assert choose([table(v0_0=0.5, v0_5=0.5)], base=0.0) == 0.0
    assert choose([table(v0_0=0.4, v0_5=0.5, v1_0=0.5)], base=0.0) == 0.5
    result = folds(tables, base=0.0)
    assert [(f["held_out"], f["chosen"]) for f in result] == [("a", 1.0), ("b", 0.5), ("c", 1.0)]
    assert result[0]["before"]["all"] == 0.50 and result[0]["after"]["all"] == 0.55
    assert result[1]["after"]["all"] == 0.70 and result[2]["after"]["multi-hop"] == 0.225


async def test_cross_validate_two_conversations_on_real_search(memory, tmp_path):
    conversations = load_conversations("locomo", irregular_copy(tmp_path))
    result = await cross_validate(memory, "locomo", conversations, "combined_hybrid_rrf", "session_weight",
                                  [1.0, 0.0], k=10)
    assert result["base"] == 0.0
    irregular, clean = (c.conversation_id for c in conversations)
    assert list(result["tables"]) == [irregular, clean]
    for t in result["tables"].values():
        assert list(t) == [0.0, 1.0]
        assert all(0.0 <= r <= 1.0 for row in t.values() for r in row.values() if r is not None)
    # Six non-adversarial questions with evidence in the irregular conversation, one in the clean one.
    assert set(result["tables"][irregular][0.0]) == {"all", "multi-hop", "single-hop", "temporal"}
    assert result["tables"][clean][0.0] == {"all": 1.0, "single-hop": 1.0}
    for fold in result["folds"]:
        assert fold["before"] == result["tables"][fold["held_out"]][0.0]
        assert fold["after"] == result["tables"][fold["held_out"]][fold["chosen"]]
    lines = report_lines(result)
    assert lines[0].startswith("recipe `combined_hybrid_rrf`, session_weight (recipe value 0.0), R@10")
    assert any(line.startswith(f"| {clean} | ") for line in lines)


@pytest.mark.parametrize("args, message", [
    (["--field", "kinds", "--values", "1"], "--field must be a numeric SearchConfig field, got 'kinds'"),
    (["--field", "session_weight", "--values", "0.5,x"], "--values: could not convert string to float"),
    (["--field", "session_weight", "--values", "1", "--conversations", "conv-clean"],
     "cross-validation needs at least two conversations"),
])
def test_bad_input_is_one_line(capsys, args, message):
    assert main([str(IRREGULAR), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pgmemory: error: ") and message in err and err.count("\n") == 1
