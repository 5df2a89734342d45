# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Smoke test of benchmarks/bench_actor.py on the tiny model: every figure is there and sane, and the project's
log-probs equal the bare loop's on the same batch (both sides compute the same thing before they are timed)."""

import json
import math
from types import ModuleType

import pytest
import torch
from repo_files import load_repo_file


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_repo_file("benchmarks/bench_actor.py", "bench_actor")


@pytest.fixture(scope="module")
def model_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("bench_models"))


def tiny_argv(model_root: str, *extra: str) -> list[str]:
    sizes = {"batch-size": 4, "prompt-length": 16, "response-length": 16, "micro-batch-size": 2, "iters": 1}
    argv = ["--device", "cpu", "--model", "tiny", "--model-root", model_root, "--micro-batch-size-log-probs", "2"]
    for key, value in sizes.items():
        argv += [f"--{key}", str(value)]
    return argv + list(extra)


def test_variable_batch_is_left_padded_prompts_and_right_padded_responses(bench: ModuleType, model_root: str) -> None:
    args = bench.parse_args(tiny_argv(model_root, "--lengths", "variable", "--batch-size", "32"))
    data = bench.make_batch(args, pad_id=2048, vocab=2000)
    mask = data.batch["attention_mask"]
    prompt_mask, response_mask = mask[:, :16], mask[:, 16:]
    prompt_lens, response_lens = prompt_mask.sum(-1), response_mask.sum(-1)
    assert prompt_lens.min() >= 8 and prompt_lens.max() <= 16 and response_lens.min() >= 2
    assert response_lens.max() <= 16 and len(set(response_lens.tolist())) > 1
    assert torch.equal(prompt_mask, prompt_mask.cummax(dim=-1).values)  # left padding: zeros, then ones
    assert torch.equal(response_mask, response_mask.flip(-1).cummax(dim=-1).values.flip(-1))  # right padding
    assert torch.equal(data.batch["input_ids"] == 2048, mask == 0) and data.batch["input_ids"][mask == 1].max() < 2000
    assert torch.equal(data.batch["responses"], data.batch["input_ids"][:, 16:])
    assert torch.equal(data.batch["advantages"] == 0, response_mask == 0)


def test_capped_batch_has_variable_prompts_and_every_response_at_the_limit(bench: ModuleType, model_root: str) -> None:
    args = bench.parse_args(tiny_argv(model_root, "--lengths", "capped", "--batch-size", "32"))
    mask = bench.make_batch(args, pad_id=2048, vocab=2000).batch["attention_mask"]
    prompt_lens = mask[:, :16].sum(-1)
    assert prompt_lens.min() >= 8 and prompt_lens.max() <= 16 and len(set(prompt_lens.tolist())) > 1
    assert bool((mask[:, 16:] == 1).all())


@pytest.mark.parametrize("mode", ["packed", "padded"])
def test_bench_actor_figures_and_log_probs_match_bare_loop(
    bench: ModuleType, model_root: str, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    gather = ("--gather-once", "off") if mode == "padded" else ()  # packed: the CPU's default, gathered once
    returned = bench.main(tiny_argv(model_root, "--mode", mode, "--lengths", "variable", *gather))
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # the JSON line comes last
    assert figures["device"] == "cpu" and figures["mode"] == mode and figures["lengths"] == "variable"
    assert figures["gather_once"] is (mode == "packed")
    assert (figures["B"], figures["P"], figures["R"]) == (4, 16, 16)
    assert figures["packed"] == (mode == "packed"), "packed mode must really pack (attention 'auto' is varlen)"
    assert 0 < figures["valid_tokens"] < figures["padded_tokens"] == 4 * 32
    for phase in bench.PHASES:
        for side in bench.SIDES:
            for name in ("s", "tokens_per_s", "peak_mib"):
                value = figures[f"{phase}_{side}_{name}"]
                assert isinstance(value, float) and math.isfinite(value) and value > 0, (phase, side, name, value)
            assert figures[f"{phase}_{side}_peak_rise_mib"] >= 0
        ratio = figures[f"{phase}_ratio"]
        assert math.isfinite(ratio) and ratio > 0
        assert ratio == pytest.approx(
            figures[f"{phase}_project_tokens_per_s"] / figures[f"{phase}_bare_tokens_per_s"], rel=1e-4
        )
    assert figures["log_probs_max_abs_diff"] < 1e-4, "project and bare loop disagree on the same batch"
    assert returned["log_probs_max_abs_diff"] == pytest.approx(figures["log_probs_max_abs_diff"], rel=1e-5)


@pytest.mark.parametrize("share", ["-0.5", "1.5"])
def test_a_zero_advantage_share_outside_zero_to_one_is_refused(
    bench: ModuleType, model_root: str, share: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """-0.5 was a traceback from torch.linspace after the model was built; 1.5 zeroed every row's advantage."""
    with pytest.raises(SystemExit) as refused:
        bench.parse_args(tiny_argv(model_root, "--zero-advantage-share", share))
    assert refused.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"in [0, 1], got {float(share)}.")


def test_an_even_count_of_timed_iterations_reports_their_median(bench: ModuleType, model_root: str) -> None:
    """With --iters 2 the figure was the slower iteration (the upper of the middle two), not their median."""
    args = bench.parse_args(tiny_argv(model_root, "--iters", "2"))
    data = bench.make_batch(args, pad_id=0, vocab=100)
    phase = {"peak_mib": 1.0, "rise_mib": None, "memory_kind": "test"}
    results = {
        side: {
            "params": 1000,
            "attn": "sdpa",
            "packed": True,
            "gather_once": True,
            "first_log_probs": torch.zeros(4, 16),
            "update": {"times": [1.0, 3.0], **phase},
            "log_probs": {"times": [0.5, 1.5], **phase},
        }
        for side in bench.SIDES
    }
    figures = bench.summarize(args, data, results)
    assert figures["update_project_s"] == 2.0 and figures["log_probs_bare_s"] == 1.0
    assert figures["update_bare_tokens_per_s"] == figures["valid_tokens"] / 2.0
