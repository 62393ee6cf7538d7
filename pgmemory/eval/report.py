"""report.md with tables and matplotlib plots (PNG) from a results.json document."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pgmemory.eval.metrics import DEFAULT_KS, percentile

LABELS = {"pgmemory": "pgmemory", "bm25": "BM25 (turns)", "dense": "dense (turns)",
          "full_context": "full context"}
RECALL_PLOT = "recall_by_category.png"
LATENCY_PLOT = "latency.png"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _num(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _groups(system: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    extra = [("non-adversarial", system["non_adversarial"])] if "non_adversarial" in system else []
    return [("overall", system["overall"]), *extra, *system["by_category"].items()]


def _stats(system: dict[str, Any], name: str) -> dict[str, Any]:
    """One named group of a system summary: overall, non-adversarial or a category."""
    if name == "overall":
        return system["overall"]
    if name == "non-adversarial":
        return system.get("non_adversarial", {})
    return system["by_category"].get(name, {})


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def retrieval_table(results: dict[str, Any]) -> list[str]:
    """Recall@k per category, pgmemory next to each turn baseline (percent of gold turns found)."""
    systems = [s for s in ("pgmemory", "bm25", "dense") if s in results["systems"]]
    header = ["category", "questions with evidence"] + [
        f"{LABELS[s]} R@{k}" for s in systems for k in DEFAULT_KS]
    rows = []
    for name, group in _groups(results["systems"]["pgmemory"]):
        stats = [_stats(results["systems"][s], name) for s in systems]
        rows.append([name, str(group["n_with_gold"])]
                    + [_pct(st.get(f"recall@{k}")) for st in stats for k in DEFAULT_KS])
    return _table(header, rows)


def context_table(results: dict[str, Any]) -> list[str]:
    """Mean context size per system (and pgmemory's search and context latency), over all questions."""
    rows = []
    for system, summary in results["systems"].items():
        o = summary["overall"]
        rows.append([LABELS[system], _num(o.get("context_chars")), _num(o.get("context_tokens")),
                     _num(o.get("search_p50_ms"), 1), _num(o.get("search_p95_ms"), 1),
                     _num(o.get("context_p50_ms"), 1), _num(o.get("context_p95_ms"), 1)])
    return _table(["system", "context chars", "context tokens", "search p50 ms", "search p95 ms",
                   "context p50 ms", "context p95 ms"], rows)


def machine_line(results: dict[str, Any]) -> str:
    """How latency was measured: cores, one query at a time, apart from ingestion."""
    m = results["machine"]
    cores = "/".join(str(c) for c in m["cores"]) or "?"
    return (f"{cores} CPU cores; searches one at a time (concurrency {m['search_concurrency']}), "
            f"after ingestion (up to {m['ingest_concurrency']} conversations at once) had finished")


def ranked_turns_lines(results: dict[str, Any]) -> list[str]:
    """How pgmemory's ranked turns were formed, with the mean counts that explain its recall."""
    o = results["systems"]["pgmemory"]["overall"]
    facts = sum(c["facts"] for c in results["conversations"].values())
    lines = [results["ranked_turns"]]
    if o.get("turns_ranked") is not None:
        lines.append("")
        lines.append(
            f"Per question, of at most {max(DEFAULT_KS)}: {_num(o['turns_ranked'], 1)} turns ranked, "
            f"{_num(o['turns_from_episodes'], 1)} from episode hits and {_num(o['turns_from_facts'], 1)} "
            f"from the sources of {_num(o['fact_hits'], 1)} fact hits; the groups hold {facts:,} facts.")
    return lines


def evidence_lines(results: dict[str, Any], limit: int = 20) -> list[str]:
    """Gold evidence read from the file: counts, the irregular entries and the turns skipped (at most
    `limit` of each)."""
    e = results["evidence"]
    lines = [(f"{e['as_is']:,} evidence entries read as they stood, {e['normalised']:,} ids recovered from "
              f"irregular entries (normalised), {e['skipped']:,} tokens skipped (unreadable, empty, naming no "
              f"turn of the conversation, or no evidence list given); {e['questions_without_evidence']:,} "
              "questions have no evidence left and count in questions but not in recall."), ""]
    if e["notes"]:
        rows = [[n["conversation_id"], n["question_id"], "(no list)" if n["raw"] is None else f"`{n['raw']}`",
                 ", ".join(n["kept"]) or "–",
                 ", ".join(f"`{s['token']}` ({s['reason']})" for s in n["skipped"]) or "–"]
                for n in e["notes"][:limit]]
        lines += _table(["conversation", "question", "entry", "read as", "skipped"], rows)
        if len(e["notes"]) > limit:
            lines.append(f"\n{len(e['notes']) - limit} more in results.json (`evidence.notes`).")
        lines.append("")
    if skipped := e.get("turns_skipped"):
        lines += [f"{len(skipped):,} turns held nothing to ingest and were skipped (evidence naming them "
                  "counts as naming no turn):", ""]
        lines += _table(["conversation", "turn", "why"],
                        [[t["conversation_id"], t["turn"], t["reason"]] for t in skipped[:limit]])
        if len(skipped) > limit:
            lines.append(f"\n{len(skipped) - limit} more in results.json (`evidence.turns_skipped`).")
        lines.append("")
    return lines


def qa_table(results: dict[str, Any]) -> list[str]:
    """Accuracy, latency p50/p95 (search + answer) and context tokens per category: the Zep paper's columns."""
    systems = [s for s in ("pgmemory", "full_context") if "accuracy" in results["systems"].get(s, {}).get(
        "overall", {})]
    header = ["category", "questions"] + [
        f"{LABELS[s]} {col}" for s in systems
        for col in ("accuracy %", "latency p50 s", "latency p95 s", "context tokens")]
    rows = []
    for name, group in _groups(results["systems"][systems[0]]):
        cells = [name, str(group["n"])]
        for s in systems:
            st = _stats(results["systems"][s], name)
            cells += [_pct(st.get("accuracy")),
                      _num(None if st.get("latency_p50_ms") is None else st["latency_p50_ms"] / 1000, 2),
                      _num(None if st.get("latency_p95_ms") is None else st["latency_p95_ms"] / 1000, 2),
                      _num(st.get("context_tokens"))]
        rows.append(cells)
    return _table(header, rows)


def ingest_table(results: dict[str, Any]) -> list[str]:
    """Per conversation: turns ingested, whether the group was reused, failures, time, LLM cost
    and the facts the group holds."""
    rows = [[cid, str(c["ingest"]["episodes"]), "yes" if c["ingest"]["reused"] else "no",
             str(c["ingest"]["failed"]), _num(c["ingest"]["seconds"], 1), str(c["ingest"]["llm_calls"]),
             str(c["ingest"]["tokens"]), str(c["facts"])] for cid, c in results["conversations"].items()]
    return _table(["conversation", "turns", "reused", "failed", "seconds", "LLM calls", "tokens", "facts"], rows)


def plot_recall(results: dict[str, Any], path: Path) -> None:
    """Grouped bars: recall@k per category for pgmemory and the turn baselines, one panel per k."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [s for s in ("pgmemory", "bm25", "dense") if s in results["systems"]]
    names = [name for name, _ in _groups(results["systems"]["pgmemory"])]
    fig, axes = plt.subplots(1, len(DEFAULT_KS), figsize=(5 * len(DEFAULT_KS), 4.2), sharey=True)
    width = 0.8 / len(systems)
    for ax, k in zip(axes, DEFAULT_KS):
        for i, system in enumerate(systems):
            summary = results["systems"][system]
            values = [_stats(summary, n).get(f"recall@{k}") for n in names]
            xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(names))]
            ax.bar(xs, [0 if v is None else 100 * v for v in values], width, label=LABELS[system])
        ax.set_title(f"recall@{k}")
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_ylim(0, 100)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("% of gold evidence turns retrieved")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency_series(results: dict[str, Any]) -> dict[str, list[float]]:
    """The latency distributions the plot shows: pgmemory search and context, and with QA each
    answering system's search+answer, in ms."""
    rows = results["questions"]
    series = {f"pgmemory {name} (with embedding)": [r["systems"]["pgmemory"][f"{name}_ms"] for r in rows]
              for name in ("search", "context")}
    for system in ("pgmemory", "full_context"):
        values = [r["systems"][system]["latency_ms"] for r in rows
                  if r["systems"].get(system, {}).get("latency_ms") is not None]
        if values:
            series[f"{LABELS[system]} search+answer"] = values
    return series


def plot_latency(results: dict[str, Any], path: Path) -> list[str]:
    """Histograms of the latency series, p50 and p95 marked, titled with the machine's cores and
    the concurrency the figures were taken at; returns the marks' labels, series by series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = latency_series(results)
    labels: list[str] = []
    fig, axes = plt.subplots(1, len(series), figsize=(5 * len(series), 4.2), squeeze=False)
    for ax, (name, values) in zip(axes[0], series.items()):
        ax.hist(values, bins=40, color="tab:blue", alpha=0.8)
        for q, style in ((50, "--"), (95, ":")):
            value = percentile(values, q)
            labels.append(f"p{q} {value:,.1f} ms")
            ax.axvline(value, color="black", linestyle=style, label=labels[-1])
        ax.set_title(name)
        ax.set_xlabel("ms")
        ax.set_ylabel("questions")
        ax.legend()
    fig.suptitle(machine_line(results), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return labels


def report_markdown(results: dict[str, Any]) -> str:
    """The Markdown report: settings, retrieval recall, context size, QA accuracy, ingestion."""
    s = results["settings"]
    n_questions = len(results["questions"])
    lines = [
        f"# pgmemory eval: {s['benchmark']} ({s['file']})",
        "",
        (f"{len(results['conversations'])} conversations, {n_questions} questions. Search recipe "
         f"`{s['recipe']}`, context limit k = {s['k']}; {s['build'].strip('[]')}; "
         f"tokens counted with {s['tokenizer']}."),
        "",
        "## Retrieval: recall of the gold evidence turns (%)",
        "",
        *ranked_turns_lines(results),
        "",
        ("Baselines rank the turns as \"speaker: text\" (BM25; dense with pgmemory's embedder). "
         "Recall@k is the share of a question's distinct gold turns among the first k distinct "
         "ranked turns (0 to 100)."),
        "",
        *retrieval_table(results),
        "",
        f"![recall@k per category]({RECALL_PLOT})",
        "",
        "### Gold evidence",
        "",
        *evidence_lines(results),
        "## Context size and latency",
        "",
        ("Context size is the mean per question. pgmemory: the `Memory.context` string; baselines: their "
         "top-k turns; full context: every turn. Latency is pgmemory's `Memory.search` (limit "
         f"{max(DEFAULT_KS)}, the ranked turns above) and `Memory.context` (limit k), each timed with its "
         f"query embedding, as one user sees it: {machine_line(results)}; one untimed warm-up query per "
         "conversation."),
        "",
        *context_table(results),
        "",
        "## QA accuracy (LLM judge)",
        "",
    ]
    qa = results["qa"]
    if qa["enabled"]:
        usage = qa["llm_usage"]
        lines += [(f"Answer and judge model: {s['llm']}; {usage['calls']} calls, "
                   f"{usage['prompt_tokens'] + usage['completion_tokens']:,} tokens."), "",
                  *qa_table(results), ""]
    else:
        lines += [qa["skipped_reason"], ""]
    lines += [f"![latency distribution, p50 and p95 marked]({LATENCY_PLOT})", "", "## Ingestion", "",
              *ingest_table(results), ""]
    return "\n".join(lines)


def write_report(results: dict[str, Any], output: Path) -> None:
    """Write report.md and its two plots into the output directory."""
    output.mkdir(parents=True, exist_ok=True)
    if results["questions"]:
        plot_recall(results, output / RECALL_PLOT)
        plot_latency(results, output / LATENCY_PLOT)
    (output / "report.md").write_text(report_markdown(results), encoding="utf-8")


def summary_lines(results: dict[str, Any]) -> list[str]:
    """A few lines for the terminal: overall recall per system and accuracy when judged."""
    lines = []
    for system, summary in results["systems"].items():
        o = summary["overall"]
        parts = [f"R@{k} {_pct(o[f'recall@{k}'])}" for k in DEFAULT_KS if f"recall@{k}" in o]
        if "recall@10" in summary.get("non_adversarial", {}):
            parts.append(f"non-adversarial R@10 {_pct(summary['non_adversarial']['recall@10'])}")
        if "accuracy" in o:
            parts.append(f"accuracy {_pct(o['accuracy'])}")
        parts.append(f"context {_num(o.get('context_tokens'))} tokens")
        lines.append(f"{LABELS[system]:<15} " + ", ".join(parts))
    return lines
