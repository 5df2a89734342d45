# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The token rules of multi-turn episodes without an engine: where a model turn ends (its turn limit, the shared
budget, an end-of-turn token), when an environment turn leaves no room, what each request asks the engine for (the
episode's tokens, the rest of the turn, the turn's own seed) and how environment steps are recorded."""

import time

import pytest

from verl.envs.base import EnvStep
from verl.models.tiny_models import build_tokenizer
from verl.workers.rollout.multi_turn import (
    TURN_SEED_STRIDE,
    ChatContinuation,
    Episode,
    EpisodeTurns,
    TurnHooks,
    TurnRunner,
    apply_step,
)
from verl.workers.rollout.request_loop import Group, Sample, resume_seed


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _runner(tokenizer, budget: int = 100, max_tokens_per_turn: int | None = 4, max_turns: int = 3) -> TurnRunner:
    return TurnRunner(
        budget=budget,
        max_turns=max_turns,
        eos_token_ids={tokenizer.convert_tokens_to_ids("<|im_end|>")},
        continuation=ChatContinuation(tokenizer),
        tokenizer=tokenizer,
        with_logprobs=True,
        max_tokens_per_turn=max_tokens_per_turn,
    )


def _words(tokenizer, count: int) -> list[int]:
    ids = tokenizer.encode("hello there my friend how are you today and tomorrow", add_special_tokens=False)
    assert len(ids) >= count
    return ids[:count]


def _episode(seed: int | None = None) -> Episode:
    return Episode(prompt_input={"prompt_token_ids": [1, 2]}, state={}, seed=seed)


def test_a_turn_that_fills_the_budget_ends_the_episode_truncated_even_at_the_turn_limit(tokenizer):
    """The turn limit (4) equals the budget's room: the turn was cut by the budget, not by the turn limit, so the
    episode ends truncated instead of stepping the environment for a turn that has no room."""
    runner = _runner(tokenizer, budget=10)
    episode = _episode()
    episode.ids, episode.loss_mask, episode.logprobs = [5] * 6, [1] * 6, [0.0] * 6
    limit = runner.turn_limit(episode)
    assert limit == 4
    assert runner.add_model_tokens(episode, _words(tokenizer, 4), [-1.0] * 4, limit) is None
    assert episode.done and episode.truncated and len(episode.ids) == 10
    # with room to spare, the same cut turn goes on to the environment (the turn limit cut it)
    episode = _episode()
    assert runner.add_model_tokens(episode, _words(tokenizer, 4), [-1.0] * 4, runner.turn_limit(episode)) == ""
    assert not episode.done and episode.open_turn


def test_a_turn_closes_only_on_its_last_token(tokenizer):
    """An end-of-turn id inside a turn the limit cut (ignore_eos writes past it) does not close the turn."""
    runner = _runner(tokenizer)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    episode = _episode()
    words = _words(tokenizer, 3)
    assert runner.add_model_tokens(episode, [words[0], eos, words[1], words[2]], None, 4) == ""
    assert episode.open_turn and not episode.done
    closed = _episode()
    assert runner.add_model_tokens(closed, words[:2] + [eos], None, 4) == "<|im_end|>"
    assert not closed.open_turn and not closed.done


def test_an_environment_turn_that_leaves_no_room_for_a_model_turn_ends_the_episode(tokenizer):
    runner = _runner(tokenizer)
    messages = [{"role": "user", "content": "try again"}]
    env_ids = runner.continuation.ids(messages, "<|im_end|>")
    for room, fits in ((len(env_ids), False), (len(env_ids) + 1, True)):
        runner.budget = 40 + room
        episode = _episode()
        episode.ids, episode.loss_mask, episode.logprobs = [5] * 40, [1] * 40, [0.0] * 40
        assert runner.add_environment_turn(episode, messages, "<|im_end|>") is fits
        assert episode.truncated is (not fits) and episode.done is (not fits)
        assert len(episode.ids) == (40 + len(env_ids) if fits else 40)
        if fits:  # the environment's tokens are not learned, and carry no log-prob
            assert episode.loss_mask == [1] * 40 + [0] * len(env_ids)
            assert episode.logprobs == [0.0] * (40 + len(env_ids))


class _Hooks(TurnHooks):
    def _turn_limit(self, group: Group, sample: Sample) -> int:
        return self._for(group).turn_limit(sample.episode)


def _group(sample: Sample, budget: int) -> Group:
    return Group(0, {"prompt_token_ids": [1, 2]}, None, 0, [sample], budget)


def test_each_turn_samples_with_its_own_seed_and_a_resumed_turn_with_a_fresh_one(tokenizer):
    hooks = _Hooks(_runner(tokenizer, max_tokens_per_turn=None))
    episode = _episode(seed=1000)
    episode.engine_ids, episode.ids = [7, 8, 9], [7, 8, 9]
    sample = Sample(seed=1000, episode=episode)
    group = _group(sample, budget=20)
    prompt, max_tokens, seed = hooks.request(group, sample)
    assert prompt["prompt_token_ids"] == [1, 2, 7, 8, 9] and max_tokens == 20 - 3 and seed == 1000
    episode.turns = 2
    assert hooks.request(group, sample)[2] == 1000 + 2 * TURN_SEED_STRIDE  # turn 2 draws apart from turns 0 and 1
    sample.tokens = [11, 12]  # the turn was stopped at a step boundary after two tokens: it goes on from them
    prompt, max_tokens, seed = hooks.request(group, sample)
    assert prompt["prompt_token_ids"] == [1, 2, 7, 8, 9, 11, 12]
    assert max_tokens == 17 - 2  # the rest of the turn's limit, fixed when the turn began
    assert seed == resume_seed(1000 + 2 * TURN_SEED_STRIDE, 2)
    greedy = Sample(seed=None, episode=_episode(seed=None))
    assert hooks.request(_group(greedy, 20), greedy)[2] is None


def test_a_group_with_a_smaller_budget_limits_its_turns_by_its_own_budget(tokenizer):
    """A row's own cap (max_response_tokens) or a response_length_schedule stage: its episodes' turns fit it."""
    hooks = _Hooks(_runner(tokenizer, budget=100, max_tokens_per_turn=None))
    sample = Sample(seed=3, episode=_episode(seed=3))
    assert hooks.request(_group(sample, budget=6), sample)[1] == 6
    runner = _runner(tokenizer, budget=100, max_tokens_per_turn=None)
    episode = _episode()
    hooks._for(_group(sample, budget=6)).add_model_tokens(episode, _words(tokenizer, 6), None, 6)
    assert episode.done and episode.truncated  # the budget (6), not a turn limit, cut it
    assert runner.budget == 100


class _Env:
    """Answers every turn with one user message and a tool call that failed; done after `rounds` turns."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def step(self, state, response):
        state["turns"] = state.get("turns", 0) + 1
        message = {"role": "tool", "content": "error: no such file"}
        return EnvStep(messages=[message], done=state["turns"] >= self.rounds, tool_calls=1, tool_errors=1)

    def release(self) -> None:
        pass


def _poll_until_done(turns: EpisodeTurns) -> tuple[bool, bool]:
    for _ in range(200):
        completed, ready = turns.poll()
        if completed or ready:
            return completed, ready
        time.sleep(0.01)
    raise AssertionError("the environment step did not finish")


def test_environment_tokens_carry_version_minus_one_and_its_tool_counts_are_kept(tokenizer):
    runner = _runner(tokenizer, max_tokens_per_turn=None)
    turns = EpisodeTurns(runner, _Env(rounds=2))
    try:
        eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        sample = Sample(seed=1, episode=_episode(seed=1))
        group = _group(sample, budget=100)
        turns.request(group, sample)
        sample.tokens, sample.versions, sample.logprobs = _words(tokenizer, 2) + [eos], [5, 5, 6], [-1.0] * 3
        sample.cut = False
        assert turns.turn_done(group, sample) is False and turns.waiting(sample)
        assert _poll_until_done(turns) == (False, True)
        episode = sample.episode
        env_tokens = len(episode.ids) - 3
        assert env_tokens > 0 and sample.episode_versions == [5, 5, 6] + [-1] * env_tokens
        assert (episode.tool_calls, episode.tool_errors, episode.cut_tool_messages) == (1, 1, 0)
        turns.request(group, sample)
        sample.tokens, sample.versions, sample.logprobs = _words(tokenizer, 1) + [eos], [7, 7], [-1.0] * 2
        assert turns.turn_done(group, sample) is False
        sample.finished = False
        assert _poll_until_done(turns) == (True, False)  # done: the group (its one sample) is complete
        assert sample.finished and episode.done and not episode.truncated
        # the last step's tool message was never shown to the model: recorded as cut, counted
        assert (episode.tool_calls, episode.tool_errors, episode.cut_tool_messages) == (2, 2, 1)
        assert episode.messages[-1].get("cut") is True
    finally:
        turns.close()


def test_an_episode_ends_after_max_turns_model_turns(tokenizer):
    runner = _runner(tokenizer, max_tokens_per_turn=None, max_turns=2)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    episode = _episode()
    for turn in (1, 2):
        end = runner.add_model_tokens(episode, _words(tokenizer, 2) + [eos], None, 50)
        apply_step(runner, episode, EnvStep(messages=[{"role": "user", "content": "more"}], done=False), end)
        assert episode.turns == turn and episode.done == (turn == 2)
    assert not episode.truncated


def test_a_turn_stopped_by_a_request_stop_token_is_a_finished_answer(tokenizer):
    """val_override_config.stop_token_ids: a turn the engine stopped on one (not the template's end of turn)."""
    runner = _runner(tokenizer, max_tokens_per_turn=None)
    episode = _episode()
    assert runner.add_model_tokens(episode, _words(tokenizer, 3), None, 50, stopped=True) is None
    assert episode.done and not episode.truncated
    cut = _episode()
    assert runner.add_model_tokens(cut, _words(tokenizer, 3), None, 50, stopped=False) is None
    assert cut.done and cut.truncated


def test_environment_images_count_against_the_engines_image_limit_with_the_prompts():
    from verl.workers.rollout.multi_turn import _check_images

    episode = Episode(
        prompt_input={"prompt_token_ids": [1], "multi_modal_data": {"image": ["a"]}}, state={}, seed=None
    )
    episode.images = ["b"]
    image_tokens = object()  # a vision-language model's expansion; only its presence is checked
    _check_images(image_tokens, episode, 1, max_images=3)  # 1 + 1 + 1: the limit itself
    _check_images(image_tokens, episode, 5, max_images=0)  # 0: no limit
    with pytest.raises(ValueError, match=r"would hold 4 images .* rollout.limit_images=3"):
        _check_images(image_tokens, episode, 2, max_images=3)
    with pytest.raises(ValueError, match="need a vision-language model"):
        _check_images(None, episode, 1, max_images=3)


def test_episodes_the_environment_ends_count_on_the_progress_bar(tokenizer):
    """rollout.disable_tqdm=false: only samples the engine ended were counted; an episode that the environment ended
    after a model turn never reached the bar (it stopped short of the call's total)."""
    from types import SimpleNamespace

    from verl.workers.rollout.request_loop import RequestLoop

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")

    class Ends:  # the environment ends every episode after its first model turn
        def step(self, state, response):
            return EnvStep(messages=[], done=True)

        def release(self):
            pass

    class Engine:  # answers every request with one word and the end of the turn
        def __init__(self):
            self.pending = []

        def add_request(self, request_id, prompt, params, lora_request=None):
            self.pending.append(request_id)

        def has_unfinished_requests(self):
            return bool(self.pending)

        def step(self):
            finished = [SimpleNamespace(token_ids=[5, eos], logprobs=None, finish_reason="stop")]
            steps = [SimpleNamespace(request_id=rid, finished=True, outputs=finished) for rid in self.pending]
            self.pending = []
            return steps

        def abort_request(self, ids):
            pass

    class Bar:
        n = 0

        def update(self, count):
            self.n += count

    loop = RequestLoop(SimpleNamespace(llm_engine=Engine()), render=dict)
    loop.turns = EpisodeTurns(_runner(tokenizer, max_tokens_per_turn=None), Ends())
    loop.progress = Bar()
    try:
        loop.admit({"prompt_token_ids": [1]}, None, [None, None], 0, 50, [_episode(), _episode()])
        groups = loop.run(1, 0, lambda max_tokens, seed: (max_tokens, seed))
        assert [sample.finished for group in groups for sample in group.samples] == [True, True]
        assert loop.progress.n == 2
    finally:
        loop.turns.close()


def test_environment_pictures_are_numbered_on_from_the_episodes_as_the_whole_conversation_numbers_them():
    """A chat template that numbers a conversation's pictures (Qwen2-VL's add_vision_id: "Picture 2: ") numbers an
    environment's pictures on from the prompt's and earlier turns', as it renders the whole conversation; they were
    rendered as "Picture 1: " again, a context the model never sees at inference."""
    import dataclasses

    from PIL import Image

    from verl.models.tiny_models import TinyModelSpec, build_processor
    from verl.workers.rollout.multi_turn import ImageTokens

    tokenizer = build_tokenizer(kind="qwen2_5_vl")
    processor = build_processor(TinyModelSpec(kind="qwen2_5_vl"), tokenizer)
    options = {"add_vision_id": True}

    def rendered(messages: list[dict]) -> list[int]:
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **options)
        return tokenizer.encode(text, add_special_tokens=False)

    runner = dataclasses.replace(
        _runner(tokenizer, budget=200, max_tokens_per_turn=None),
        continuation=ChatContinuation(tokenizer, options),
        image_tokens=ImageTokens(processor, tokenizer),
    )
    picture = Image.new("RGB", (56, 56))
    conversation = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}]
    prompt_ids = rendered(conversation)
    episode = Episode(
        prompt_input={"prompt_token_ids": prompt_ids, "multi_modal_data": {"image": [picture]}}, state={}, seed=None
    )
    answer = _words(tokenizer, 3) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    for _ in range(2):
        turn_end = runner.add_model_tokens(episode, answer, None, runner.turn_limit(episode))
        shown = [
            {"role": "tool", "content": [{"type": "image", "image": picture}, {"type": "text", "text": "Closer"}]}
        ]
        assert runner.add_environment_turn(episode, shown, turn_end)
        conversation += [{"role": "assistant", "content": tokenizer.decode(answer[:-1])}, shown[0]]
    assert "Picture 3: " in tokenizer.decode(episode.engine_ids)
    assert prompt_ids + episode.engine_ids == rendered(conversation)
