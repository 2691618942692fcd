"""The bundled corpus and QA set: fictional places and people, generated from a fixed seed.

`python -m skyhub.envs.search.synth` rewrites `data/corpus.jsonl` (200 passages in
Search-R1's wiki format: `"Title"` on the first line, then the text) and `data/qa-dev.jsonl`
(50 questions, each answered by one passage). Everything is invented, so the data is free to
ship and no model can answer from memory: it has to search.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
SEED, N_PASSAGES, N_QUESTIONS = 1234, 200, 50

_SYL = ("ar", "bel", "cor", "dun", "el", "fen", "gar", "hol", "is", "jor", "kel", "lum",
        "mor", "nev", "or", "pel", "quin", "ros", "sal", "tor", "ul", "vor", "wen", "yar", "zan")
_FIRST = ("Oren", "Lysa", "Tamsin", "Idris", "Marek", "Saoirse", "Ptolem", "Wendeline", "Caius",
          "Ilse", "Bramwell", "Odalys", "Fenwick", "Rosalind", "Teodor", "Yara")
_EXPORTS = ("saffron", "copper", "amber", "wool", "salt", "glass", "tea", "timber", "pearls",
            "silk", "olives", "marble")
_ANIMALS = ("heron", "lynx", "otter", "falcon", "stag", "badger", "crane", "wolf")
_INSTR = ("lute", "harp", "cello", "flute", "zither", "oboe")


def _names(rng: random.Random, n: int) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        name = "".join(rng.choice(_SYL) for _ in range(rng.randint(2, 3))).capitalize()
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def generate(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """(corpus rows `{"id", "contents"}`, QA rows `{"id", "question", "golden_answers",
    "gold_id"}`), the same for the same seed."""
    rng = random.Random(seed)
    names = _names(rng, N_PASSAGES)
    corpus, questions = [], []
    for i, name in enumerate(names):
        doc_id = str(i)
        if i % 2 == 0:  # a town
            founder = f"{rng.choice(_FIRST)} {rng.choice(names)}sson"
            year, export, animal = rng.randint(1100, 1900), rng.choice(_EXPORTS), \
                rng.choice(_ANIMALS)
            text = (f"{name} is a fictional coastal town founded in {year} by {founder}. "
                    f"Its main export is {export}, and its emblem shows a {animal}.")
            qa = [(f"Who founded the town of {name}?", [founder]),
                  (f"What is the main export of {name}?", [export]),
                  (f"In what year was {name} founded?", [str(year)])]
        else:  # a musician
            first = rng.choice(_FIRST)
            instr, home = rng.choice(_INSTR), rng.choice(names[::2])
            count = rng.randint(2, 19)
            text = (f"{first} {name} is a fictional composer from {home} who plays the {instr}. "
                    f"{first} {name} has written {count} symphonies.")
            qa = [(f"Which instrument does the composer {first} {name} play?",
                   [instr, f"the {instr}"]),
                  (f"Where is the composer {first} {name} from?", [home]),
                  (f"How many symphonies has {first} {name} written?", [str(count)])]
        title = name if i % 2 == 0 else f"{first} {name}"
        corpus.append({"id": doc_id, "contents": f'"{title}"\n{text}'})
        if len(questions) < N_QUESTIONS and i % 4 in (0, 1):
            q, gold = rng.choice(qa)
            questions.append({"id": f"synth-{len(questions)}", "question": q,
                              "golden_answers": gold, "gold_id": doc_id, "gold_title": title})
    return corpus, questions


def write_bundled() -> None:
    corpus, questions = generate()
    DATA_DIR.mkdir(exist_ok=True)
    for name, rows in (("corpus.jsonl", corpus), ("qa-dev.jsonl", questions)):
        with (DATA_DIR / name).open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    write_bundled()
