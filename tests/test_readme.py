# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What README.md tells users agrees with the code: the differences from EasyR1 and verl it states, and the examples'
settings it quotes."""

import pathlib
import re

import torch
import yaml

from verl.algorithms.policy_losses import compute_policy_loss, default_loss_avg_mode


REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def test_coming_from_easyr1_states_sapos_and_gspos_own_aggregation():
    text = " ".join(section("Coming from EasyR1 / verl").split())
    for loss_type in ("sapo", "gspo", "gspo_token"):
        assert default_loss_avg_mode(loss_type) == "seq-mean-token-mean" != default_loss_avg_mode("default")
        assert f"`{loss_type}`" in text.split("**SAPO's and GSPO's aggregation**")[1].split("**")[0]
    assert f"(`{default_loss_avg_mode('sapo')}`" in text and "EasyR1 averages over all tokens (`token-mean`)" in text


def _loss_and_grad(loss_type: str, advantages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    old = torch.randn(2, 5) * 0.1 - 1.0
    log_probs = (old + torch.randn(2, 5) * 0.05).requires_grad_(True)
    loss, _ = compute_policy_loss(old, log_probs, advantages, torch.ones(2, 5), loss_type, 0.2, 0.3, 3.0, "token-mean")
    loss.backward()
    return loss.detach(), log_probs.grad


def test_verls_gspo_is_gspo_token_as_the_readme_says():
    text = " ".join(section("Coming from EasyR1 / verl").split())
    assert "verl's `gspo` is `gspo_token` here" in text
    per_sequence = torch.tensor([[1.0] * 5, [-0.5] * 5])
    per_token = torch.tensor([[1.0, 0.2, -0.3, 0.8, 0.5], [-0.5, 0.1, 0.4, -0.2, 0.0]])
    for advantages, gradients_equal in ((per_sequence, True), (per_token, False)):
        loss, grad = _loss_and_grad("gspo", advantages)
        token_loss, token_grad = _loss_and_grad("gspo_token", advantages)
        torch.testing.assert_close(loss, token_loss)  # the same loss in value
        assert torch.allclose(grad, token_grad, atol=1e-7) == gradients_equal


def test_the_tools_demo_paragraph_quotes_its_warm_start_steps():
    steps = yaml.safe_load((REPO / "examples" / "cpu_tools" / "sft.yaml").read_text())["trainer"]["max_steps"]
    grpo = yaml.safe_load((REPO / "examples" / "cpu_tools" / "config.yaml").read_text())["trainer"]["max_steps"]
    paragraph = " ".join(README[README.index("`make demo-tools` runs") :].split("\n\n")[0].split())
    assert re.search(rf"`examples/cpu_tools/sft.yaml`, {steps} steps\); then {grpo} GRPO steps", paragraph)
    assert "sandbox" not in paragraph  # the code demo's figures belong to the code demo


def test_the_supported_models_table_says_what_the_family_tests_run():
    """docs/gpu.md's table of vision-language families has a row per tests/families.py row, and each column says
    "yes" exactly for the families whose test of that column runs."""
    from families import FAMILIES, vl_kinds

    columns = [
        "processor",
        "video",
        "engine",
        "engine_video",
        "packed",
        "ulysses",
        "hybrid_engine",
        "env_images",
        "grpo",
    ]
    docs = (REPO / "docs" / "gpu.md").read_text()
    rows = {}
    for line in docs.splitlines():
        match = re.match(r"\| [^|]+ \| `(\w+)` \|(.*)\|$", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split("|")][: len(columns)]
    assert sorted(rows) == sorted(FAMILIES)
    for index, check in enumerate(columns):
        assert sorted(kind for kind, cells in rows.items() if cells[index] == "yes") == sorted(vl_kinds(check)), check
