"""The tiny model for harness recipes: `model.tiny_words` are single tokens that the untrained
model prefers (a prior held in its weights alone), and a harness's own prompts train the tiny
tokenizer, so that they encode as words."""

from __future__ import annotations

import pytest

from skyhub.harness import load_harness
from skyhub.harness import terminus_format as fmt
from skyhub.trainer.tiny import env_corpus, tiny_model, train_tokenizer

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

WORDS = [f'{{"commands": [{{"keystrokes": "./mark {w}\\n"}}], "task_complete": false}}'
         for w in ("amber", "birch", "cedar", "delta")]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return env_corpus("terminal-relay", {"backend": "local", "steps": 20, "n_tasks": 20},
                      episodes=8)


def mass(model, ids: list[int], inputs) -> torch.Tensor:
    """The probability `model` gives `ids` together, at every position of `inputs`."""
    with torch.no_grad():
        return model(inputs).logits.softmax(-1)[..., ids].sum(-1)


def test_each_word_is_one_token_that_decodes_to_itself(corpus):
    tok = train_tokenizer(corpus, 1000, words=WORDS)
    for w in WORDS:
        ids = tok(w, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tok.decode(ids) == w
    # the words are also found inside a longer text, as a model's reply would be re-read
    assert tok("ok " + WORDS[2])["input_ids"][-1] == tok.convert_tokens_to_ids(WORDS[2])


def test_the_untrained_model_prefers_the_words_and_keeps_the_prior_when_saved(
        corpus, tmp_path):
    from transformers import AutoModelForCausalLM

    tok = train_tokenizer(corpus, 1000, words=WORDS)
    ids = tok.convert_tokens_to_ids(WORDS)
    g = torch.Generator().manual_seed(1)
    inputs = torch.randint(0, len(tok), (6, 64), generator=g)
    plain = tiny_model(len(tok), seed=3)
    assert mass(plain, ids, inputs).mean() < 0.05  # 4 of ~1000 tokens: about 0.4%
    model = tiny_model(len(tok), seed=3, prefer=ids, prefer_mass=0.5)
    got = mass(model, ids, inputs)
    assert 0.3 < got.mean() < 0.7 and got.min() > 0.15
    # no word is favoured over another: each gets a share, on real text too
    text = tok(corpus[1], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        each = model(text).logits.softmax(-1)[0, :, ids].mean(0)
    assert each.min() > 0.2 * each.sum() / len(ids)
    # the prior is in the weights: a saved and reloaded checkpoint is the same model
    model.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.allclose(mass(again, ids, inputs), got, atol=1e-5)


def test_a_harness_corpus_shortens_its_prompt(corpus):
    terminus = load_harness("terminus")
    first = fmt.prompt("json", instruction=corpus[1], terminal="$ ", max_duration=60,
                       max_wait=55)
    plain = train_tokenizer(corpus, 1000)
    taught = train_tokenizer(corpus + terminus.corpus(), 1000)
    assert len(taught(first)["input_ids"]) < 0.5 * len(plain(first)["input_ids"])
    # the handover prompts are in the corpus, without their placeholders
    assert any("Another agent will take over" in t for t in terminus.corpus())
    assert not any("{instruction}" in t for t in terminus.corpus())
    assert load_harness("builtin").corpus() == []
