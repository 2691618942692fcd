"""toy-recall: one bare word per reply; with hops=2 the word is only in the env's reply."""

from __future__ import annotations

import pytest

import skyhub


def test_the_shown_word_scores_one_and_another_word_zero() -> None:
    with skyhub.make("toy-recall") as env:
        obs, _ = env.reset(seed=0)
        word = obs.split(":")[1].strip()
        assert env.step(f"  {word.upper()} and more")[1:3] == (1.0, True)
        env.reset(seed=0)
        _, reward, term, _, info = env.step("zzz")
        assert (reward, term, info["outcome"]) == (0.0, True, "failure")


def test_an_empty_reply_is_explained_not_raised() -> None:
    with skyhub.make("toy-recall", max_turns=2) as env:
        env.reset(seed=0)
        obs, reward, term, trunc, _ = env.step("   ")
        assert "one word" in obs and (reward, term, trunc) == (0.0, False, False)


def test_two_hops_name_the_key_read_then_answer() -> None:
    with skyhub.make("toy-recall", hops=2) as env:
        obs, _ = env.reset(seed=3)
        key = obs.split(":")[1].strip()
        table = env.unwrapped.task.meta["table"]
        assert key in table and table[key] not in obs  # the word is not in the prompt
        obs, _, term, _, info = env.step(key)
        assert obs.startswith(f"{key} = {table[key]}") and not term and info["looked_up"] == key
        assert env.step(table[key])[1:3] == (1.0, True)


def test_two_hops_a_non_key_first_reply_is_a_guess() -> None:
    with skyhub.make("toy-recall", hops=2) as env:
        env.reset(seed=3)
        answer = env.unwrapped.task.answer
        assert env.step(answer)[1:3] == (1.0, True)  # a lucky guess ends the episode


def test_without_naming_the_key_any_first_reply_reads_it() -> None:
    with skyhub.make("toy-recall", hops=2, name_key=False, n_words=6) as env:
        obs, _ = env.reset(seed=3)
        key, task = obs.split(":")[1].strip(), env.unwrapped.task
        obs, _, term, _, _ = env.step("")
        assert obs.startswith(f"{key} = {task.answer}") and not term
        assert env.step(task.answer)[1:3] == (1.0, True)
        assert "anything" in env.system_prompt


def test_n_words_limits_the_answers_and_is_checked() -> None:
    with skyhub.make("toy-recall", n_words=4) as env:
        assert len({t.answer for t in env.unwrapped.tasks}) == 4
    with pytest.raises(ValueError, match="n_words"):
        skyhub.make("toy-recall", n_words=1)
    with pytest.raises(ValueError, match="dev split"):
        skyhub.make("toy-recall", split="dev", n_words=6)
    with pytest.raises(ValueError, match="hops"):
        skyhub.make("toy-recall", hops=3)


def test_reference_actions_solve_both_variants() -> None:
    for kwargs in ({}, {"hops": 2}, {"hops": 2, "name_key": False}):
        with skyhub.make("toy-recall", **kwargs) as env:
            for seed in range(20):
                env.reset(seed=seed)
                while True:
                    _, reward, term, trunc, _ = env.step(env.unwrapped.reference_action())
                    if term or trunc:
                        break
                assert reward == 1.0, (kwargs, seed)
