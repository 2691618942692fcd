"""Shared pieces of the trainer's tests: a tiny tokenizer trained on toy envs' text and a tiny
random model (nothing is downloaded)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module", autouse=True)
def _torch_threads_restored() -> Iterator[None]:
    """Some modules set torch's thread count for the process (the Tinker server's
    `threads=`); the next module gets the count back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tokenizer():
    from skyhub.trainer.tiny import env_corpus, train_tokenizer

    texts = (env_corpus("toy-recall", {"hops": 2}, episodes=32)
             + env_corpus("toy-lookup", {}, episodes=32))
    return train_tokenizer(texts)


@pytest.fixture
def model(tokenizer):
    from skyhub.trainer.tiny import tiny_model

    return tiny_model(len(tokenizer), seed=0)


@pytest.fixture
def chat(tokenizer):
    from skyhub.trainer.token_layout import ChatFormat

    return ChatFormat(tokenizer)
