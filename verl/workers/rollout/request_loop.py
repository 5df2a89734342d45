# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The engine's request loop, the one way this project generates (docs/async.md), and the request that drives it.

Each admitted prompt becomes one engine request per sample; the engine steps until `quota` groups (a prompt's n
samples) are complete. An asynchronous call aborts unfinished requests, keeping their tokens, log-probs and per-token
versions, and resubmits them next call as prompt + tokens so far; nothing is dropped. Requests get `LLM.generate`'s
order and seeds (seed + j for sample j), so running every group to completion samples exactly as it does.
"""

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RolloutRequest:
    """What the driver asks of the rollout engines in one call, colocated or in a rollout pool; the defaults are a
    synchronous training step's."""

    version: int = 0
    """Weight updates the engine's weights carry: the policy version its tokens are tagged with."""
    quota: int | None = None
    """Complete groups to return per data-parallel rank; None: every prompt of the call, run to completion."""
    max_staleness: int | None = None
    """Each group trains by its admission version + max_staleness; None: every group is due now (synchronous)."""
    response_length: int | None = None
    """Most tokens per response, a stage of data.response_length_schedule; None: rollout.response_length."""
    validate: bool = False
    """A validation call: rollout.val_override_config applies and seeds come from the validation stream."""
    sampling: dict[str, Any] = field(default_factory=dict)
    """vLLM SamplingParams overrides for this call (the ReMax greedy pass: temperature=0, n=1)."""
    stream: bool = False
    """Asynchronous: hand over each group as it completes, to be scored while the engines generate (the call is then
    a poll)."""
    round: int = 0
    """An asynchronous step's generation round (online filtering adds rounds); one batch per `batch_key`."""

    @property
    def batch_key(self) -> tuple[int, int]:
        return self.version, self.round


@dataclass
class Sample:
    """One response being generated: its tokens so far, their engine log-probs and policy versions."""

    seed: int | None
    """The sampling seed of its first request (seed + j, as vLLM gives sample j)."""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    """The policy version (weight updates done) under which each token was sampled."""
    finished: bool = False
    cut: bool = False
    """Finished by its length budget (vLLM's finish_reason "length"), not by a stop token or string."""
    resumed: int = 0
    """Times it was stopped at a step boundary and continued after a weight sync."""
    episode: Any = None
    """Multi-turn: the Episode it plays; `tokens`, `logprobs` and `versions` then hold the current model turn only."""
    episode_versions: list[int] = field(default_factory=list)
    """Multi-turn: the policy version of every token of the episode's response (-1: environment tokens)."""
    turn_limit: int = 0
    """Multi-turn: the token limit of the current model turn, fixed when it began."""
    index: int = 0
    """Its place among the samples admitted by one call (named in errors)."""


@dataclass
class Group:
    key: int
    """Admission order: older groups are returned first."""
    prompt: dict[str, Any]
    payload: Any
    """What the caller keeps with the prompt (its one-row DataProto)."""
    admitted_version: int
    samples: list[Sample]
    budget: int
    """Most tokens of each of its responses."""
    rendered: Any = None
    """The prompt rendered once for the group's first requests, as `LLM.generate` does (images run the processor)."""

    @property
    def complete(self) -> bool:
        return all(sample.finished for sample in self.samples)


def resume_seed(seed: int | None, generated: int) -> int | None:
    """A fresh seed for a sample continued after `generated` tokens (its first seed would replay its opening draws)."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, generated]).generate_state(1, dtype=np.uint64)[0]) >> 2


_ENV_WAIT_S = 0.05
"""With only environment steps running, how long the loop waits for one before looking again."""


class RequestLoop:
    """Admitted groups of one engine, kept across calls (see the module docstring).

    `make_params(max_tokens, seed)` builds one request's SamplingParams (n=1, DELTA); `render(prompt)` makes what
    `add_request` takes. `run` is the colocated rollout's blocking call; its pieces also serve a thread that steps
    the engine continuously (rollout pool, `verl.serve`), the only caller of every method but `record` and `pick`.
    `step` is the one place in the project that steps an engine.
    """

    def __init__(
        self, llm: Any, render: Callable[[dict[str, Any]], Any], name: str = "loop", mirror: Any = None
    ) -> None:
        self.llm = llm
        self.render = render
        self.name = name
        """Prefixes its request ids: loops that share an engine never reuse one another's ids."""
        self.mirror = mirror
        """Tensor-parallel first process: the `engine_mirror.EngineLeader` recording engine calls for the peers."""
        self.turns: Any = None
        """Multi-turn: a `multi_turn.EpisodeTurns` or `client_episodes.ClientTurns` (set by the rollout)."""
        self.lora_request: Any = None
        """The `LoRARequest` every request is added with (rollout.lora_sync=adapters; set by the rollout)."""
        self.groups: dict[int, Group] = {}
        self.active: dict[str, tuple[Group, Sample]] = {}
        self._keys = count()
        self._request_ids = count()
        self.progress: Any = None
        """A tqdm bar counting finished samples, while a caller shows one."""
        self._reported: set[int] = set()
        """Complete groups handed over for scoring and still in the loop."""
        self.lock: Any = contextlib.nullcontext()
        """Held while a step's outputs are recorded, for threads that read the groups meanwhile (rollout pool)."""
        self.outside: Callable[[Any], None] | None = None
        """Where the outputs of requests the caller added to the engine itself go (`verl.serve`'s clients)."""

    def admit(
        self,
        prompt: dict[str, Any],
        payload: Any,
        seeds: list[int | None],
        version: int,
        budget: int,
        episodes: list[Any] | None = None,
    ) -> Group:
        key = next(self._keys)
        episodes = episodes if episodes is not None else [None] * len(seeds)
        samples = [Sample(seed=seed, episode=episodes[j], index=j) for j, seed in enumerate(seeds)]
        self.groups[key] = group = Group(key, prompt, payload, version, samples, budget)
        return group

    @property
    def in_flight(self) -> int:
        return len(self.groups)

    def clear(self) -> None:
        """After a failed call: drop every group, abort the engine's requests and close the multi-turn hooks, so none
        runs on into the next call (the trainer regenerates from its checkpoint)."""
        self.suspend()
        self.groups.clear()
        self._reported.clear()
        if self.turns is not None:
            turns, self.turns = self.turns, None
            turns.close()

    def deadlines(self, version: int, max_staleness: int | None) -> dict[int, int]:
        """The version by which each group must train: admission + `max_staleness` (None: now)."""
        return {
            key: version if max_staleness is None else group.admitted_version + max_staleness
            for key, group in self.groups.items()
        }

    def run(
        self,
        quota: int,
        version: int,
        make_params: Callable[[int, int | None], Any],
        max_staleness: int | None = None,
        max_engine_steps: int | None = None,
        hand_over: bool = False,
    ) -> list[Group] | None:
        """Step the engine until `quota` groups are complete and taking them keeps every group within its deadline;
        return them, removed. Unfinished samples are aborted, tokens kept. With `max_engine_steps`, return None after
        that many steps (requests stay; the next call goes on as an unbroken one); with `hand_over`, also as soon as a
        group completes that the step cannot take yet, for the caller to score."""
        self.check_quota(quota, version, max_staleness)
        if self.pick(quota, version, max_staleness) is None:
            self.submit(version, make_params)
            finished_groups = False
            engine = self.llm.llm_engine
            steps = 0
            while engine.has_unfinished_requests() or (self.turns is not None and self.turns.pending):
                if finished_groups and self.pick(quota, version, max_staleness) is not None:
                    break
                if max_engine_steps is not None and (steps >= max_engine_steps or (hand_over and finished_groups)):
                    return None
                steps += 1
                completed = False
                if self.turns is not None:  # environment steps run meanwhile; their episodes continue here
                    completed, ready = self.turns.poll()
                    if self.progress is not None:  # episodes the environment ended count too
                        finished = sum(sample.finished for group in self.groups.values() for sample in group.samples)
                        self.progress.update(finished - self.progress.n)
                    if ready:
                        self.submit(version, make_params)
                    if not engine.has_unfinished_requests():
                        finished_groups = completed
                        if not completed:
                            self.turns.wait(_ENV_WAIT_S)
                        continue
                finished_groups = self.step(version) or completed
            self.suspend()
        picked = self.pick(quota, version, max_staleness)
        if picked is None:
            raise RuntimeError("The engine ran out of requests before the step's groups were complete.")
        return self.pop(picked)

    def check_quota(self, quota: int, version: int, max_staleness: int | None) -> None:
        """Refuse a call that cannot keep every group within its deadline (a bug in the caller's admission)."""
        if quota > len(self.groups):
            raise ValueError(f"A request loop holding {len(self.groups)} groups cannot complete {quota} of them.")
        deadline = self.deadlines(version, max_staleness)
        if not self._feasible([], deadline, quota, version - 1):  # this step's quota counts as one more step
            raise ValueError(
                f"{len(self.groups)} groups with deadlines up to version {max(deadline.values())} cannot all train by "
                f"their deadlines at {quota} groups per step from version {version}: the admission let in more than "
                "the staleness bound allows."
            )

    def pick(self, quota: int, version: int, max_staleness: int | None) -> list[int] | None:
        """The keys of the `quota` complete groups with the earliest deadlines, if training them at `version` keeps
        every other group within its deadline; else None."""
        deadline = self.deadlines(version, max_staleness)
        complete = sorted((deadline[key], key) for key, group in self.groups.items() if group.complete)
        picked = [key for _, key in complete[:quota]]
        return picked if len(picked) == quota and self._feasible(picked, deadline, quota, version) else None

    def pop(self, keys: list[int]) -> list[Group]:
        """Remove the groups `keys` (complete ones) from the loop, in admission order."""
        return [self.groups.pop(key) for key in sorted(keys)]

    def has_newly_complete(self) -> bool:
        return any(group.complete and group.key not in self._reported for group in self.groups.values())

    def newly_complete(self, taken: list[Group] | None = None) -> list[Group]:
        """The complete groups not handed over before (those in the loop and those just `taken`), each once, for
        scoring while generation goes on."""
        taken = taken or []
        fresh = [group for group in self.groups.values() if group.complete and group.key not in self._reported]
        fresh += [group for group in taken if group.key not in self._reported]
        self._reported.update(group.key for group in fresh)
        self._reported.difference_update(group.key for group in taken)  # out of the loop: never seen again
        return fresh

    def _feasible(self, picked: list[int], deadline: dict[int, int], quota: int, version: int) -> bool:
        """Whether, with `picked` trained at `version`, the others can each train by their deadline at `quota` groups
        per later step: for every deadline d, the groups left due by d fit in (d - version) x quota slots."""
        chosen = set(picked)
        left = sorted(deadline[key] for key in self.groups if key not in chosen)
        return all(count <= (due - version) * quota for count, due in enumerate(left, start=1))

    def submit(self, version: int, make_params: Callable[[int, int | None], Any]) -> int:
        """Add every unfinished, not running sample to the engine, continuing from its tokens; returns how many."""
        running = {id(sample) for _, sample in self.active.values()}
        added = 0
        for group in self.groups.values():
            for sample in group.samples:
                if sample.finished or id(sample) in running:
                    continue
                request_id = f"{self.name}-{next(self._request_ids)}"
                if sample.episode is not None and self.turns.waiting(sample):  # its environment step is running
                    continue
                if sample.tokens and sample.versions[-1] != version:  # its tokens will span two policy versions
                    sample.resumed += 1  # (not a pause under the same weights: a round of a step, a validation)
                if sample.episode is not None:  # its turn, or the rest of a stopped one
                    prompt, max_tokens, seed = self.turns.request(group, sample)
                    engine_input = self.render(prompt)
                elif sample.tokens:  # continue from its tokens: the prefix is prefilled under the new weights
                    prompt = {
                        **group.prompt,
                        "prompt_token_ids": list(group.prompt["prompt_token_ids"]) + sample.tokens,
                    }
                    max_tokens, seed = group.budget - len(sample.tokens), resume_seed(sample.seed, len(sample.tokens))
                    engine_input = self.render(prompt)
                else:
                    prompt = group.prompt  # one object for the group's requests: the peers render it once too
                    if group.rendered is None:
                        group.rendered = self.render(dict(group.prompt))
                    engine_input, max_tokens, seed = dict(group.rendered), group.budget, sample.seed
                self._add(request_id, prompt, engine_input, make_params(max_tokens, seed), group, sample)
                added += 1
        return added

    def _add(
        self, request_id: str, prompt: dict[str, Any], engine_input: Any, params: Any, group: Group, sample: Sample
    ) -> None:
        """Add one request to the engine (and record it for a mirror's peers, which render `prompt` themselves)."""
        if self.mirror is not None:
            self.mirror.record("add", request_id, prompt, params, self.lora_request is not None)
        self.llm.llm_engine.add_request(request_id, engine_input, params, lora_request=self.lora_request)
        self.active[request_id] = (group, sample)

    def step(self, version: int = 0) -> bool:
        """One engine step, its outputs recorded under policy `version`; whether a group became complete."""
        if self.mirror is not None:  # the peers step with it, after the calls recorded since the last step
            self.mirror.send("step")
        outputs = self.llm.llm_engine.step()
        with self.lock:
            return self.record(outputs, version)

    def record(self, outputs: list[Any], version: int) -> bool:
        """Append one step's (DELTA) outputs to their samples, tagged `version`; whether a group became complete."""
        finished_groups = False
        for output in outputs:
            if output.request_id not in self.active and self.outside is not None:
                self.outside(output)
                continue
            group, sample = self.active[output.request_id]
            for completion in output.outputs:
                ids = list(completion.token_ids)
                sample.tokens.extend(ids)
                sample.versions.extend([version] * len(ids))
                if completion.logprobs is not None:
                    sample.logprobs.extend(
                        float(entry[token].logprob) for entry, token in zip(completion.logprobs, ids)
                    )
                sample.cut = completion.finish_reason == "length"
            if output.finished:
                del self.active[output.request_id]
                if sample.episode is not None and not self.turns.turn_done(group, sample):
                    continue  # the environment answers the turn; the episode goes on
                sample.finished = True
                if self.progress is not None:
                    self.progress.update(1)
                finished_groups = finished_groups or group.complete
        return finished_groups

    def suspend(self) -> None:
        """Abort the engine's requests; their samples keep their tokens and continue at the next `submit`."""
        if self.active:
            if self.mirror is not None:
                self.mirror.record("abort_request", list(self.active))
            self.llm.llm_engine.abort_request(list(self.active))
        self.active.clear()
