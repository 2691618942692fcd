"""What the search tests share: a document planted in the bundled corpus and a question
only that document answers."""

from __future__ import annotations

import json
from pathlib import Path

from skyhub.task import Task

PLANTED = {"id": "planted", "contents": '"Zorblat Quintessa"\nZorblat Quintessa is a purple '
                                        'lighthouse on the moon, built by Mirela Vantongeren.'}
TASK = Task(id="q-zorblat", prompt="Who built the Zorblat Quintessa lighthouse?",
            answer=["Mirela Vantongeren"],
            meta={"split": "test", "question": "Who built the Zorblat Quintessa lighthouse?",
                  "golden_answers": ["Mirela Vantongeren"], "dataset": "test",
                  "gold_title": "Zorblat Quintessa"})


def write_corpus(directory: Path) -> Path:
    """The bundled corpus with PLANTED inserted in the middle, as `directory/corpus.jsonl`."""
    import skyhub.envs.search

    rows = [json.loads(line) for line in
            (Path(skyhub.envs.search.__file__).parent / "data/corpus.jsonl").read_text()
            .splitlines()]
    rows.insert(57, PLANTED)
    path = directory / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
