# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Algorithms from the user's own file (`path/to/file.py:function`): config validation, the registries' lookups, the
run-time output checks, and the examples in examples/algorithms/."""

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.model_folders import config_only_model
from tests.test_examples import recipe_args
from tests.trainer.test_config import base_args
from verl.algorithms import core_algos
from verl.algorithms.policy_losses import compute_policy_loss
from verl.algorithms.rollout_correction import CorrectionSettings, compute_rollout_correction
from verl.algorithms.user_functions import AlgorithmFunctionError, training_step
from verl.trainer.config import load_config
from verl.utils.config import ConfigError


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER_FILE = os.path.join(REPO, "tests", "algorithms", "user_grpo_ppo.py")


@pytest.fixture()
def files(tmp_path):
    """A minimal valid setup (data, model directory, reward) and a copy of the user's algorithm file."""
    (tmp_path / "train.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    config_only_model(tmp_path / "model")
    (tmp_path / "reward.py").write_text("def compute_score(sample):\n    return {'overall': 1.0}\n")
    shutil.copy(USER_FILE, tmp_path / "algo.py")
    return tmp_path


def batch(seed: int = 0) -> dict:
    """4 groups of 2 responses, outcome rewards on the last token, some padding."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(8, 6)
    mask[::3, 4:] = 0
    rewards = torch.zeros(8, 6)
    rewards[:, 3] = torch.randint(0, 3, (8,), generator=generator).float()
    index = np.array([f"p{i // 2}" for i in range(8)], dtype=object)
    return {"token_level_rewards": rewards, "response_mask": mask, "index": index}


# ------------------------------------------------------------------------------------------------ selection


def test_user_functions_validate_and_match_the_builtins(files, monkeypatch):
    monkeypatch.chdir(files)  # relative paths, as a user writes them, become absolute
    config = load_config(
        [
            *base_args(files),
            "algorithm.adv_estimator=algo.py:grpo",
            "algorithm.kl_penalty=algo.py:k3",
            "algorithm.use_kl_loss=true",
            "worker.actor.loss_type=algo.py:ppo_clip",
            "worker.actor.loss_avg_mode=algo.py:token_mean",
        ]
    )
    spec = str(files / "algo.py")
    assert config.algorithm.adv_estimator == f"{spec}:grpo"
    assert config.worker.actor.loss_type == f"{spec}:ppo_clip"
    assert config.worker.actor.kl_penalty == f"{spec}:k3"  # the actor's KL loss derives from algorithm.kl_penalty
    assert config.worker.actor.loss_avg_mode == f"{spec}:token_mean"
    assert core_algos.is_grouped_adv_estimator(config.algorithm.adv_estimator)

    inputs = batch()
    options = {"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True}
    expected = core_algos.compute_advantage_return("grpo", **inputs, **options)
    got = core_algos.compute_advantage_return(config.algorithm.adv_estimator, **inputs, **options)
    assert all(torch.equal(a, b) for a, b in zip(expected, got))
    assert expected[0].abs().sum() > 0

    log_probs = torch.randn(8, 6, requires_grad=True)
    old = log_probs.detach() + 0.4 * torch.randn(8, 6)
    advantages = torch.randn(8, 6)
    results = []
    for loss_type, agg in (
        ("default", "token-mean"),
        (config.worker.actor.loss_type, config.worker.actor.loss_avg_mode),
    ):
        loss, metrics = compute_policy_loss(
            old, log_probs, advantages, inputs["response_mask"], loss_type, 0.2, 0.3, 3.0, agg
        )
        (grad,) = torch.autograd.grad(loss, log_probs)
        results.append((loss, grad, metrics))
    (loss_a, grad_a, metrics_a), (loss_b, grad_b, metrics_b) = results
    assert torch.equal(loss_a, loss_b) and torch.equal(grad_a, grad_b)
    assert metrics_a == metrics_b and metrics_a["pg_clipfrac"] > 0
    ref = log_probs.detach() + 0.1 * torch.randn(8, 6)
    assert torch.equal(
        core_algos.compute_kl(log_probs, ref, "k3"), core_algos.compute_kl(log_probs, ref, f"{spec}:k3")
    )


def test_a_worker_process_loads_the_function_on_first_use(files):
    """A Ray worker never validates the config: the first lookup of a spec loads and registers it."""
    code = f"""
import torch
from verl.algorithms.policy_losses import compute_policy_loss
mask = torch.ones(2, 3)
log_probs = torch.zeros(2, 3, requires_grad=True)
loss, _ = compute_policy_loss(log_probs.detach(), log_probs, torch.ones(2, 3), mask, {str(files / "algo.py") + ":ppo_clip"!r},
                              0.2, 0.3, 3.0, {str(files / "algo.py") + ":token_mean"!r})
print(loss.item())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert float(out.stdout) == -1.0  # -A r with A = 1, r = 1 on every token, token-mean


def test_a_user_correction_mode_weights_and_rejects(files):
    (files / "correct.py").write_text(
        "import torch\n"
        "def capped(log_ratio, response_mask, is_cap):\n"
        "    weights = log_ratio.exp().clamp(max=is_cap) * response_mask\n"
        "    keep = (log_ratio * response_mask).sum(-1, keepdim=True).abs() < 1.0\n"
        "    return weights, keep.expand_as(log_ratio)\n"
    )
    config = load_config(
        [
            *base_args(files),
            f"algorithm.rollout_correction.mode={files / 'correct.py'}:capped",
            "algorithm.rollout_correction.is_cap=1.5",
            "worker.rollout.calculate_log_probs=true",
        ]
    )
    settings = config.algorithm.rollout_correction
    mask = torch.ones(2, 3)
    old = torch.zeros(2, 3)
    rollout = torch.tensor([[-1.0, 0.5, 0.0], [-0.1, -0.1, -0.1]])  # row 0 sums to 0.5, row 1 to 0.3: both kept
    rollout[0, 2] = -2.0  # row 0 now sums to 2.5: rejected
    result = compute_rollout_correction(settings, old, rollout, mask)
    assert torch.equal(result.mask, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))
    assert torch.allclose(result.weights[1], torch.full((3,), 0.1).exp())
    assert result.weights[0].sum() == 0 and result.metrics["rollout_corr/masked_share"] == pytest.approx(0.5)


# ------------------------------------------------------------------------------------------------ validation errors


def test_missing_file_names_the_key_and_the_path(files):
    with pytest.raises(
        ConfigError,
        match=rf"worker.actor.loss_type='.*nope.py:loss': the file .*nope.py does not exist on {socket.gethostname()};"
        r".* \(on a cluster, every node reads it at that path\)",
    ):
        load_config([*base_args(files), f"worker.actor.loss_type={files / 'nope.py'}:loss"])


def test_missing_function_lists_those_defined(files):
    with pytest.raises(ConfigError, match=r"has no function 'grpoo' \(functions defined there: grpo, k3, ppo_clip"):
        load_config([*base_args(files), f"algorithm.adv_estimator={files / 'algo.py'}:grpoo"])


def test_a_spec_without_a_function_name_says_how_to_write_it(files):
    with pytest.raises(ConfigError, match=r"algorithm.kl_penalty=.*'path/to/file.py:function'"):
        load_config([*base_args(files), f"algorithm.kl_penalty={files / 'algo.py'}"])


def test_an_unknown_name_offers_the_file_form(files):
    with pytest.raises(ConfigError, match=r"'worker.critic.loss_avg_mode' is 'tokenmean'.*path/to/file.py:function"):
        load_config([*base_args(files), "worker.critic.loss_avg_mode=tokenmean"])


@pytest.mark.parametrize(
    ("key", "source", "kind", "expected"),
    [
        ("algorithm.adv_estimator", "def f(rewards, mask):\n    pass\n", "advantage estimator", "token_level_rewards"),
        (
            "algorithm.adv_estimator",
            "def f(token_level_rewards, response_mask, critic):\n    pass\n",
            "advantage estimator",
            "it requires critic, which the trainer does not pass",
        ),
        ("worker.actor.loss_type", "def f(x, clip):\n    pass\n", "policy loss", r"x: PolicyLossInputs"),
        ("algorithm.kl_penalty", "def f(log_probs):\n    pass\n", "KL estimator", r"log_probs, ref_log_probs"),
        ("worker.actor.loss_avg_mode", "def f(loss_mat, mask):\n    pass\n", "loss aggregation", "token_sums"),
        ("worker.critic.loss_avg_mode", "def f(*args):\n    pass\n", "loss aggregation", r"it takes \*args"),
        ("algorithm.rollout_correction.mode", "def f(ratio):\n    pass\n", "off-policy correction", "log_ratio"),
    ],
)
def test_a_signature_that_does_not_fit_names_the_kind_and_the_expected_one(files, key, source, kind, expected):
    (files / "bad.py").write_text(source)
    with pytest.raises(ConfigError) as error:
        load_config([*base_args(files), f"{key}={files / 'bad.py'}:f", "worker.rollout.calculate_log_probs=true"])
    message = str(error.value)
    assert message.startswith(f"{key}=") and f"cannot be used as the {kind}" in message
    assert re.search(expected, message), message
    assert f"Expected signature of the {kind}: def " in message


def test_a_grouped_estimator_needs_several_responses_per_prompt(files):
    args = [arg for arg in base_args(files) if not arg.startswith("worker.rollout.n=")]
    with pytest.raises(ConfigError, match=r"algo.py:grpo compares responses within a group \(it takes `index`"):
        load_config([*args, "worker.rollout.n=1", f"algorithm.adv_estimator={files / 'algo.py'}:grpo"])


def test_an_estimator_that_takes_values_trains_a_critic(files):
    (files / "critic_est.py").write_text(
        "def est(token_level_rewards, response_mask, values):\n    return values, values\n"
    )
    spec = f"{files / 'critic_est.py'}:est"
    with pytest.raises(ConfigError, match=r"trains a critic \(it takes `values`\): set worker.critic.model"):
        load_config([*base_args(files), f"algorithm.adv_estimator={spec}"])
    config = load_config(
        [
            *base_args(files),
            f"algorithm.adv_estimator={spec}",
            f"worker.critic.model.model_path={files / 'model'}",
            "worker.critic.global_batch_size=4",
        ]
    )
    assert core_algos.estimator_needs_critic(config.algorithm.adv_estimator)
    assert not core_algos.is_grouped_adv_estimator(config.algorithm.adv_estimator)


def test_a_file_that_fails_to_import_says_why(files):
    (files / "broken.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(ConfigError, match=r"importing .*broken.py failed with ModuleNotFoundError"):
        load_config([*base_args(files), f"worker.actor.loss_type={files / 'broken.py'}:f"])
    # sys.exit() at import ended the config check with status 0 and no word, as if the run had succeeded
    (files / "exits.py").write_text("import sys\nsys.exit(0)\ndef f(x):\n    return x.log_ratio\n")
    with pytest.raises(ConfigError, match=r"importing .*exits.py failed with SystemExit"):
        load_config([*base_args(files), f"worker.actor.loss_type={files / 'exits.py'}:f"])
    # a builtin has no Python signature to check (a raw ValueError traceback)
    (files / "builtin.py").write_text("import torch\nkl = torch.sub\n")
    with pytest.raises(ConfigError, match=r"'kl' in .*builtin.py has no Python signature .*define a Python function"):
        load_config(
            [*base_args(files), f"algorithm.kl_penalty={files / 'builtin.py'}:kl", "algorithm.use_kl_loss=true"]
        )


# ------------------------------------------------------------------------------------------------ run-time checks


def write_bad_functions(path) -> str:
    path.write_text(
        "import torch\n"
        "def short(token_level_rewards, response_mask, index):\n"
        "    return token_level_rewards[:, :2], token_level_rewards\n"
        "def nan_loss(x):\n"
        "    return x.log_ratio * float('nan')\n"
        "def detached(x):\n"
        "    return -x.advantages\n"
        "def negative(log_ratio, response_mask):\n"
        "    return -torch.ones_like(log_ratio)\n"
        "def raises(x):\n"
        "    return x.log_ratio[x.missing]\n"
        "def no_scalar(token_sums, token_counts, num_tokens, num_seqs, max_response_length):\n"
        "    return token_sums\n"
        "def exits(token_level_rewards, response_mask, index):\n"
        "    raise SystemExit('all rewards are zero')\n"
    )
    return str(path)


def test_wrong_shape_or_non_finite_output_names_file_function_and_step(files):
    path = write_bad_functions(files / "bad_runtime.py")
    with training_step(7), pytest.raises(AlgorithmFunctionError) as error:
        core_algos.compute_advantage_return(f"{path}:short", **batch())
    assert str(error.value).startswith(f"The advantage estimator short in {path} (algorithm.adv_estimator) returned ")
    assert "advantages of shape (8, 2), expected (8, 6) at training step 7" in str(error.value)

    log_probs = torch.zeros(2, 3, requires_grad=True)
    args = (log_probs.detach(), log_probs, torch.ones(2, 3), torch.ones(2, 3))
    with (
        training_step(3),
        pytest.raises(
            AlgorithmFunctionError,
            match=r"nan_loss in .* returned the loss with 6 non-finite value\(s\).* at training step 3",
        ),
    ):
        compute_policy_loss(*args, f"{path}:nan_loss", 0.2, 0.3, 3.0, "token-mean")
    with pytest.raises(AlgorithmFunctionError, match="returned a loss without gradient"):
        compute_policy_loss(*args, f"{path}:detached", 0.2, 0.3, 3.0, "token-mean")
    with pytest.raises(
        AlgorithmFunctionError, match=r"no_scalar .* returned the aggregated loss of shape \(2,\), expected \(\)"
    ):
        compute_policy_loss(*args, "default", 0.2, 0.3, 3.0, f"{path}:no_scalar")
    settings = CorrectionSettings(mode=f"{path}:negative")
    with pytest.raises(
        AlgorithmFunctionError, match="negative .* returned negative weights .* outside a training step"
    ):
        compute_rollout_correction(settings, torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3))
    # a function that raises is named too, and the message ends with its own frames (it crosses Ray whole)
    with training_step(4), pytest.raises(AlgorithmFunctionError, match=r"raises in .* raised AttributeError") as error:
        compute_policy_loss(*args, f"{path}:raises", 0.2, 0.3, 3.0, "token-mean")
    where = str(error.value).split("Where it raised (most recent call last):\n")[1].splitlines()
    assert where[0] == f'  File "{path}", line 11, in raises' and where[-1].startswith("AttributeError: "), where
    assert "at training step 4" in str(error.value)
    # sys.exit() in a user function escaped unnamed (in a worker: an actor that died)
    with training_step(5), pytest.raises(AlgorithmFunctionError, match=r"exits in .* raised SystemExit \(all rewards"):
        core_algos.compute_advantage_return(f"{path}:exits", **batch())


# ------------------------------------------------------------------------------------------------ the examples


def test_the_example_estimator_is_a_scaled_leave_one_out_baseline():
    from tests.repo_files import load_repo_file

    example = load_repo_file("examples/algorithms/leave_one_out.py", "example_leave_one_out")
    inputs = batch(seed=3)
    advantages, returns = example.leave_one_out(**inputs)
    rloo, _ = core_algos.compute_advantage_return("rloo", **inputs)
    scores = inputs["token_level_rewards"].sum(-1).view(4, 2)
    std = scores.std(dim=-1).repeat_interleave(2)
    assert torch.allclose(advantages, rloo / (std + 1e-6).unsqueeze(-1) * inputs["response_mask"], atol=1e-5)
    assert torch.equal(advantages, returns) and advantages.abs().sum() > 0


def test_the_example_loss_clips_by_the_sign_of_the_advantage():
    from tests.repo_files import load_repo_file
    from verl.algorithms.policy_losses import PolicyLossInputs

    example = load_repo_file("examples/algorithms/asymmetric_clip.py", "example_asymmetric_clip")
    ratios = torch.tensor([[0.5, 1.0, 2.0, 0.5, 1.0, 2.0]])
    log_probs = ratios.log().requires_grad_()
    x = PolicyLossInputs(
        log_probs=log_probs,
        log_ratio=log_probs,
        advantages=torch.tensor([[1.0, 1.0, 1.0, -1.0, -1.0, -1.0]]),
        mask=torch.ones(1, 6),
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_dual=3.0,
        tau_positive=1.0,
        tau_negative=1.05,
    )
    terms = example.asymmetric_clip(x)
    assert torch.allclose(terms.loss_mat, torch.tensor([[-0.5, -1.0, -1.28, 0.8, 1.0, 2.0]]))
    (grad,) = torch.autograd.grad(terms.loss_mat.sum(), log_probs)  # d(-A r)/d log r = -A r where not clipped
    assert torch.allclose(grad, torch.tensor([[-0.5, -1.0, 0.0, 0.0, 1.0, 2.0]]))
    assert terms.clipped_higher.tolist() == [[False, False, True, False, False, False]]
    assert terms.clipped_lower.tolist() == [[False, False, False, True, False, False]]
    from verl.algorithms.policy_losses import _ppo_loss  # it is PPO's clip, without the dual clip (as it says)

    ppo = _ppo_loss(dataclasses.replace(x, clip_ratio_dual=float("inf")))
    assert torch.equal(ppo.loss_mat, terms.loss_mat)


def _inputs(log_probs: torch.Tensor, old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor):
    from verl.algorithms.policy_losses import PolicyLossInputs

    return PolicyLossInputs(
        log_probs=log_probs,
        log_ratio=log_probs - old,
        advantages=advantages,
        mask=mask,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_dual=3.0,
        tau_positive=1.0,
        tau_negative=1.05,
    )


def test_the_entropy_covariance_examples_act_on_the_highest_covariance_tokens(monkeypatch):
    """verl's clip_cov and kl_cov as example files: the chosen tokens are the ones the covariance of log-prob and
    advantage picks, padding never, and every other token gets the plain surrogate."""
    from tests.repo_files import load_repo_file

    example = load_repo_file("examples/algorithms/entropy_covariance.py", "example_entropy_covariance")
    generator = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 6, generator=generator) * 3
    log_probs = (old + 0.05 * torch.randn(4, 6, generator=generator)).requires_grad_()
    advantages = torch.randn(4, 1, generator=generator).expand(4, 6).contiguous()
    mask = torch.ones(4, 6)
    mask[3, 4:] = 0
    valid = mask.bool()
    covariance = (advantages - advantages[valid].mean()) * (log_probs.detach() - log_probs.detach()[valid].mean())
    plain = -advantages * torch.exp(log_probs.detach() - old)

    monkeypatch.setattr(example, "KL_COV_RATIO", 3 / 22)  # 3 of the 22 response tokens
    x = _inputs(log_probs, old, advantages, mask)
    loss = example.kl_cov(x).loss_mat.detach()
    penalised = ~torch.isclose(loss, plain)
    top3 = torch.topk(torch.where(valid, covariance, float("-inf")).flatten(), 3).indices
    assert sorted(penalised.flatten().nonzero().flatten().tolist()) == sorted(top3.tolist())
    torch.testing.assert_close(loss[penalised], (plain + (log_probs.detach() - old).abs())[penalised])

    monkeypatch.setattr(example, "CLIP_COV_RATIO", 2 / 22)
    monkeypatch.setattr(example, "CLIP_COV_LOW", float(covariance[valid].median()))
    monkeypatch.setattr(example, "CLIP_COV_HIGH", float("inf"))
    terms = example.clip_cov(x)
    (grad,) = torch.autograd.grad(terms.loss_mat.sum(), log_probs)
    detached = valid & (grad == 0) & ~(terms.clipped_higher | terms.clipped_lower)
    assert detached.sum() == 2 and (covariance[detached] > example.CLIP_COV_LOW).all()
    free = valid & ~detached & ~(terms.clipped_higher | terms.clipped_lower)
    torch.testing.assert_close(terms.loss_mat.detach()[free], plain[free])


def test_the_example_recipe_selects_both_example_files(monkeypatch):
    monkeypatch.chdir(REPO)
    config = load_config(recipe_args(os.path.join(REPO, "examples", "recipes", "qwen2_5_7b_math_own_algorithm.sh")))
    assert config.algorithm.adv_estimator == f"{REPO}/examples/algorithms/leave_one_out.py:leave_one_out"
    assert config.worker.actor.loss_type == f"{REPO}/examples/algorithms/asymmetric_clip.py:asymmetric_clip"
    assert core_algos.is_grouped_adv_estimator(config.algorithm.adv_estimator)
