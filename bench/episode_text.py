"""Recall of what an episode's vector is computed FROM (issue 13): the speaker resolved into
first-person text, chat formulas left out. The dev conversations are ingested once (or their eval
groups reused); each recipe's vectors (the shipped blend: own text + PREVIOUS_WEIGHT x the turn
before's own text, both made by the recipe) are written over the stored ones, every
non-adversarial question with evidence is searched through `Memory.search` and scored as
`python -m pgmemory.eval.crossval` scores a setting; the recipe is chosen by
leave-one-conversation-out. The shipped vectors are written back at the end.

    python -m bench.episode_text ../shared/data/locomo/locomo-dev.json

Recipes: `shipped` ("actor: content"), `coref` (I / me / my / mine / myself -> the speaker, "I'm"
-> "<speaker> is" ...), `coref_you` (also you / your -> the previous turn's speaker when it is
another person), `trim` (sentences that are questions, or of at most 3 words, left out unless
nothing else is left), `coref_trim` (both), `dated` ("speaker on 8 May 2023: text", the session's date), `next w` (the shipped text, and the vector also gains w x the own vector of
the turn after, in the same session: the reply, known once it arrives).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
from pathlib import Path

import numpy as np

from bench.episode_vectors import befores, pct, score, unit, write_vectors
from pgmemory.eval.crossval import folds
from pgmemory.eval.harness import load_conversations
from pgmemory.eval.ingestion import ingest_conversation
from pgmemory.eval.readers import Conversation
from pgmemory.ingest.embed_episode import PREVIOUS_WEIGHT
from pgmemory.memory import Memory, default_extractor
from pgmemory.search.config import resolve_config

A = "['’]"
FIRST = [(rf"\bI{A}m\b", "{} is"), (r"\bI am\b", "{} is"), (rf"\bI{A}ve\b", "{} has"), (rf"\bI{A}d\b", "{} would"),
         (rf"\bI{A}ll\b", "{} will"), (r"\bI\b", "{}"), (r"\b[Mm]yself\b", "{}"), (r"\b[Mm]y\b", "{}'s"),
         (r"\b[Mm]ine\b", "{}'s"), (r"\b[Mm]e\b", "{}")]
SECOND = [(rf"\b[Yy]ou{A}re\b", "{} is"), (rf"\b[Yy]ou{A}ve\b", "{} has"), (rf"\b[Yy]ou{A}ll\b", "{} will"),
          (r"\b[Yy]ourself\b", "{}"), (r"\b[Yy]ours\b", "{}'s"), (r"\b[Yy]our\b", "{}'s"), (r"\b[Yy]ou\b", "{}")]
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def resolved(text: str, speaker: str, other: str | None) -> str:
    """The text with first-person pronouns replaced by the speaker (second-person by `other`)."""
    for pattern, repl in FIRST:
        text = re.sub(pattern, repl.format(speaker), text)
    for pattern, repl in SECOND if other else ():
        text = re.sub(pattern, repl.format(other), text)
    return text


def trimmed(text: str) -> str:
    """The text without its questions and its sentences of at most 3 words (unless nothing is left)."""
    kept = [s for s in SENTENCE_END.split(text)
            if s.strip() and not s.rstrip().endswith("?") and len(s.split()) > 3]
    return " ".join(kept) or text


def texts(conv: Conversation, recipe: str) -> list[str]:
    """Each turn's own text under the recipe, as "speaker: text"."""
    out = []
    for i, t in enumerate(conv.turns):
        prev = conv.turns[i - 1] if i and conv.turns[i - 1].session_id == t.session_id else None
        other = prev.speaker if prev is not None and prev.speaker != t.speaker else None
        text = t.text
        if "trim" in recipe:
            text = trimmed(text)
        if "coref" in recipe:
            text = resolved(text, t.speaker, other if "you" in recipe else None)
        out.append(f"{t.speaker} on {t.time:%-d %B %Y}: {text}" if recipe == "dated" else f"{t.speaker}: {text}")
    return out


async def vectors(memory: Memory, conv: Conversation, recipe: str) -> list[np.ndarray]:
    """The episodes' vectors: own + PREVIOUS_WEIGHT x the turn before's own (+ w x the turn after's
    own for `next w`)."""
    own = [np.array(v) for v in await memory.embedder.embed(texts(conv, recipe))]
    out = [own[i] + (PREVIOUS_WEIGHT * own[b[0]] if b else 0) for i, b in enumerate(befores(conv))]
    if recipe.startswith("next "):
        w = float(recipe.split()[1])
        for i, b in enumerate(befores(conv)):
            if b:  # turn i is the turn after b[0]
                out[b[0]] = out[b[0]] + w * own[i]
    return [unit(v) for v in out]


async def main(args: argparse.Namespace) -> None:
    conversations = load_conversations("locomo", Path(args.path))
    tables: dict[str, dict[str, dict]] = {}
    async with await Memory.open(extractor=default_extractor(None)) as memory:
        for conv in conversations:
            await ingest_conversation(memory, "locomo", conv, lambda: None)
            table = {}
            for name in ["shipped", *args.recipes]:
                await write_vectors(memory, conv, await vectors(memory, conv, name))
                table[name] = await score(memory, conv, resolve_config(args.recipe), args.k)
                print(f"load {os.getloadavg()[0]:.1f} {conv.conversation_id} {name}: R@{args.k} "
                      f"{pct(table[name]['all'])} multi-hop {pct(table[name].get('multi-hop'))}", flush=True)
            await write_vectors(memory, conv, await vectors(memory, conv, "shipped"))
            tables[conv.conversation_id] = table
    cats = ["all", "multi-hop", "single-hop", "temporal", "open-domain"]
    print("\n| recipe | " + " | ".join(f"{c} {x}" for x in cats for c in tables) + " |")
    print("|---|" + "---|" * (len(cats) * len(tables)))
    for name in next(iter(tables.values())):
        print(f"| {name} | " + " | ".join(pct(t[name].get(x)) for x in cats for t in tables.values()) + " |")
    print(f"\n| held out | chosen | R@{args.k} before -> after | multi-hop before -> after |\n|---|---|---|---|")
    for f in folds(tables, "shipped"):
        print(f"| {f['held_out']} | {f['chosen']} | {pct(f['before']['all'])} -> {pct(f['after']['all'])} | "
              f"{pct(f['before'].get('multi-hop'))} -> {pct(f['after'].get('multi-hop'))} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.episode_text", description=__doc__.split("\n")[0])
    parser.add_argument("path", help="a LoCoMo file")
    parser.add_argument("--recipes", type=lambda v: v.split(","), default=["coref", "coref_you", "trim", "coref_trim"])
    parser.add_argument("--recipe", default="combined_hybrid_rrf")
    parser.add_argument("--k", type=int, default=10)
    asyncio.run(main(parser.parse_args()))
