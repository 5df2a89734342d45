# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rollout correction against a plain-Python restatement of each mode's formula, and against verl 0.9.1.

The restatement (`reference`) walks one response at a time with math.exp on the published formulas. The verl parity
tests run verl 0.9.1's own functions from verl/trainer/ppo/rollout_corr_helper.py, taken from its wheel (see
`verl_091`).
"""

import ast
import math
import re
import subprocess
import sys
import types
import zipfile
from typing import Any, Optional

import pytest
import torch

from verl.algorithms import rollout_correction as rc
from verl.algorithms.rollout_correction import (
    CORRECTION_MODES,
    CorrectionSettings,
    compute_rollout_correction,
    mismatch_metrics,
)


LENGTHS = (8, 5, 1, 3, 7, 0, 6, 4)
WIDTH = 8
EXTREME_LOG_RATIOS = {
    (0, 1): 3.0,  # rho = 20: above C and above the icepop band
    (0, 3): -2.0,  # rho = 0.14: below the icepop band
    (4, 2): 1.2,  # rho = 3.3: above C, inside the icepop band
    (6, 0): -0.9,  # rho = 0.41: below the icepop band
}
BEYOND_CLAMP_LOG_RATIOS = {(1, 0): 30.0, (3, 1): -25.0}  # clamped to +-20
METRIC_NAMES = ("is_ratio_mean", "is_ratio_max", "truncated_share", "masked_share", "k3_kl", "log_ppl_diff")


def make_batch(
    seed: int, lengths: tuple[int, ...] = LENGTHS, extremes: dict[tuple[int, int], float] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random (old, rollout, mask) with old - rollout ~ N(0, 0.15) on response tokens, the given extreme
    log-ratios, and unrelated random values in the padding."""
    gen = torch.Generator().manual_seed(seed)
    rollout = -3.0 * torch.rand(len(lengths), WIDTH, generator=gen)
    old = rollout + 0.15 * torch.randn(len(lengths), WIDTH, generator=gen)
    for (i, t), log_ratio in (extremes or {}).items():
        old[i, t] = rollout[i, t] + log_ratio
    mask = (torch.arange(WIDTH) < torch.tensor(lengths)[:, None]).float()
    old = torch.where(mask > 0, old, 5.0 * torch.randn(old.shape, generator=gen))
    return old, rollout, mask


def reference(s: CorrectionSettings, old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor) -> dict:
    """The modes restated one response at a time: weights, mask and metrics (see compute_rollout_correction)."""
    weights, new_mask, ratios, truncated, zeroed, k3, seq_log_ppl_diffs = [], [], [], [], [], [], []
    for o_row, r_row, m_row in zip(old.tolist(), rollout.tolist(), mask.tolist()):
        tokens = [t for t, m in enumerate(m_row) if m]
        log_rho = {t: max(-20.0, min(20.0, o_row[t] - r_row[t])) for t in tokens}
        seq_log_ratio = sum(log_rho.values())
        seq_ratio = math.exp(max(-20.0, min(20.0, seq_log_ratio)))
        if tokens:
            seq_log_ppl_diffs.append(sum(r_row[t] - o_row[t] for t in tokens) / len(tokens))
        w_row, m_out = [0.0] * WIDTH, [0.0] * WIDTH
        for t in tokens:
            rho = math.exp(log_rho[t])
            k3.append(rho - 1.0 - log_rho[t])
            ratio, w, keep, cut, dropped = rho, 1.0, True, False, False
            if s.mode == "tis":
                w, cut = min(rho, s.is_cap), rho > s.is_cap
            elif s.mode == "icepop":
                dropped = not s.mask_low <= rho <= s.mask_high
                w = 0.0 if dropped else rho
            elif s.mode == "seq_is":
                ratio, w, cut = seq_ratio, min(seq_ratio, s.is_cap), seq_ratio > s.is_cap
            elif s.mode == "seq_mis":
                keep = s.seq_low <= math.exp(seq_log_ratio) <= s.seq_high
                ratio, w, cut, dropped = seq_ratio, min(seq_ratio, s.is_cap), keep and seq_ratio > s.is_cap, not keep
            elif s.mode == "geo_rs":
                ratio = math.exp(seq_log_ratio / len(tokens))
                keep = s.geo_low <= ratio <= s.geo_high
                dropped = not keep
            elif s.mode == "decoupled":
                dropped = rho > s.is_cap
                w = 0.0 if dropped else rho
            w_row[t], m_out[t] = (w, 1.0) if keep else (0.0, 0.0)
            ratios.append(ratio)
            truncated.append(cut)
            zeroed.append(dropped)
        weights.append(w_row)
        new_mask.append(m_out)
    n = max(len(ratios), 1)
    metrics = {
        "is_ratio_mean": sum(ratios) / n,
        "is_ratio_max": max(ratios, default=0.0),
        "truncated_share": sum(truncated) / n,
        "masked_share": sum(zeroed) / n,
        "k3_kl": sum(k3) / n,
        "log_ppl_diff": sum(seq_log_ppl_diffs) / max(len(seq_log_ppl_diffs), 1),
    }
    return {"weights": torch.tensor(weights), "mask": torch.tensor(new_mask), "metrics": metrics}


def assert_matches(result: rc.CorrectionResult, expected: dict) -> None:
    torch.testing.assert_close(result.weights, expected["weights"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(result.mask, expected["mask"], rtol=0, atol=0)
    for name in METRIC_NAMES:
        assert result.metrics[f"rollout_corr/{name}"] == pytest.approx(expected["metrics"][name], rel=1e-5, abs=1e-6)


def test_every_mode_is_implemented() -> None:
    # the built-ins: a module run before in the same process may have registered a user's 'file.py:function'
    assert {mode for mode in rc._MODES if ".py:" not in mode} == set(CORRECTION_MODES)


@pytest.mark.parametrize("mode", CORRECTION_MODES)
def test_the_options_a_mode_is_said_to_read_are_those_that_change_its_weights(mode: str) -> None:
    """rc.MODE_OPTIONS (the config warns of a mode's unread options by it) against what each mode computes."""
    import dataclasses

    old, rollout, mask = make_batch(0, extremes=EXTREME_LOG_RATIOS)
    changed = {"is_cap": 1.2, "mask_low": 0.9, "mask_high": 1.1, "seq_low": 0.95, "seq_high": 1.05}
    changed |= {"geo_low": 0.99, "geo_high": 1.01}
    assert set(changed) == set(rc.CORRECTION_OPTIONS) and set(rc.MODE_OPTIONS) == set(CORRECTION_MODES)
    base = compute_rollout_correction(CorrectionSettings(mode=mode), old, rollout, mask)
    for key, value in changed.items():
        other = compute_rollout_correction(
            dataclasses.replace(CorrectionSettings(mode=mode), **{key: value}), old, rollout, mask
        )
        differs = not (torch.equal(base.weights, other.weights) and torch.equal(base.mask, other.mask))
        assert differs == (key in rc.MODE_OPTIONS[mode]), (mode, key)


@pytest.mark.parametrize("mode", CORRECTION_MODES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mode_matches_reference(mode: str, seed: int) -> None:
    old, rollout, mask = make_batch(seed, extremes={**EXTREME_LOG_RATIOS, **BEYOND_CLAMP_LOG_RATIOS})
    settings = CorrectionSettings(mode=mode)
    result = compute_rollout_correction(settings, old, rollout, mask)
    assert_matches(result, reference(settings, old, rollout, mask))
    assert result.weights.dtype == result.mask.dtype == torch.float32
    assert set(result.metrics) == {f"rollout_corr/{name}" for name in METRIC_NAMES}


@pytest.mark.parametrize("mode", ["none", "bypass"])
def test_none_and_bypass_only_report(mode: str) -> None:
    old, rollout, mask = make_batch(0, extremes=EXTREME_LOG_RATIOS)
    result = compute_rollout_correction(CorrectionSettings(mode=mode), old, rollout, mask)
    assert torch.equal(result.weights, mask) and torch.equal(result.mask, mask)
    assert result.metrics["rollout_corr/is_ratio_max"] == pytest.approx(math.exp(3.0), rel=1e-5)


def test_tis_caps_the_token_weight() -> None:
    old, rollout, mask = make_batch(0, extremes=EXTREME_LOG_RATIOS)
    result = compute_rollout_correction(CorrectionSettings(mode="tis", is_cap=2.0), old, rollout, mask)
    assert result.weights[0, 1] == result.weights[4, 2] == 2.0
    assert result.weights[0, 3] == pytest.approx(math.exp(-2.0), rel=1e-5)  # small ratios are kept as they are
    assert torch.equal(result.mask, mask)


def test_icepop_zeroes_tokens_outside_the_band_and_keeps_them_in_the_mask() -> None:
    old, rollout, mask = make_batch(0, extremes=EXTREME_LOG_RATIOS)
    s = CorrectionSettings(mode="icepop", mask_low=0.5, mask_high=5.0)
    result = compute_rollout_correction(s, old, rollout, mask)
    for i, t in [(0, 1), (0, 3), (6, 0)]:
        assert result.weights[i, t] == 0.0 and result.mask[i, t] == 1.0
    assert result.weights[4, 2] == pytest.approx(math.exp(1.2), rel=1e-5)  # inside the band: not truncated
    assert torch.equal(result.mask, mask)


@pytest.mark.parametrize("mode", ["seq_is", "seq_mis"])
def test_sequence_modes_give_one_weight_per_sequence(mode: str) -> None:
    old, rollout, mask = make_batch(3, extremes=EXTREME_LOG_RATIOS)
    result = compute_rollout_correction(CorrectionSettings(mode=mode), old, rollout, mask)
    for row_weights, row_mask in zip(result.weights, result.mask):
        kept = row_weights[row_mask > 0]
        assert kept.numel() == 0 or torch.all(kept == kept[0])
    assert (
        result.weights[0, 0] == 2.0 or result.mask[0, 0] == 0.0
    )  # row 0 has log-ratios +3 and -2, S ~ 1: capped or rejected


def test_seq_mis_rejects_whole_sequences_and_truncates_the_rest() -> None:
    old, rollout, mask = make_batch(0, extremes={**EXTREME_LOG_RATIOS, **BEYOND_CLAMP_LOG_RATIOS})
    s = CorrectionSettings(mode="seq_mis", is_cap=1.1, seq_low=0.5, seq_high=2.0)
    result = compute_rollout_correction(s, old, rollout, mask)
    seq_ratio = ((old - rollout) * mask).clamp(-20, 20).sum(-1).exp()
    rejected = (seq_ratio < 0.5) | (seq_ratio > 2.0)
    assert rejected[0] and rejected[1] and rejected[3] and rejected.sum() < mask.shape[0] - 1  # both outcomes occur
    assert torch.equal(result.mask, torch.where(rejected[:, None], 0.0, mask))
    kept_ratio = seq_ratio[~rejected & (mask.sum(-1) > 0)]
    assert torch.any(kept_ratio > 1.1)  # the cap is exercised on kept sequences
    expected = torch.where(rejected[:, None], 0.0, seq_ratio.clamp(max=1.1)[:, None] * mask)
    torch.testing.assert_close(result.weights, expected)


def test_geo_rs_rejects_by_the_geometric_mean_and_keeps_weight_one() -> None:
    old, rollout, mask = make_batch(0, extremes={**EXTREME_LOG_RATIOS, **BEYOND_CLAMP_LOG_RATIOS})
    result = compute_rollout_correction(CorrectionSettings(mode="geo_rs"), old, rollout, mask)
    assert torch.equal(result.weights, result.mask)
    kept = result.mask.sum(-1) > 0
    assert 0 < kept.sum() < (mask.sum(-1) > 0).sum()  # both outcomes occur
    assert not kept[0] and not kept[1]  # mean log-ratio far above log 1.1


def test_decoupled_filters_tokens_above_the_cap_instead_of_truncating() -> None:
    old, rollout, mask = make_batch(0, extremes=EXTREME_LOG_RATIOS)
    result = compute_rollout_correction(CorrectionSettings(mode="decoupled", is_cap=2.0), old, rollout, mask)
    assert result.weights[0, 1] == result.weights[4, 2] == 0.0  # AReaL: behav_imp_weight > cap -> 0
    assert result.weights[0, 3] == pytest.approx(math.exp(-2.0), rel=1e-5)
    assert torch.equal(result.mask, mask)
    assert result.metrics["rollout_corr/truncated_share"] == 0.0
    assert result.metrics["rollout_corr/masked_share"] > 0.0


@pytest.mark.parametrize("mode", CORRECTION_MODES)
@pytest.mark.parametrize("fill", [(1e4, -1e4), (-1e4, 1e4), (float("nan"), float("inf"))])
def test_padding_values_change_nothing(mode: str, fill: tuple[float, float]) -> None:
    old, rollout, mask = make_batch(5, extremes=EXTREME_LOG_RATIOS)
    settings = CorrectionSettings(mode=mode)
    base = compute_rollout_correction(settings, old, rollout, mask)
    padded = compute_rollout_correction(
        settings, torch.where(mask > 0, old, fill[0]), torch.where(mask > 0, rollout, fill[1]), mask
    )
    assert torch.equal(base.weights, padded.weights) and torch.equal(base.mask, padded.mask)
    assert base.metrics == padded.metrics
    assert torch.all(padded.weights[mask == 0] == 0) and torch.all(padded.mask[mask == 0] == 0)


@pytest.mark.parametrize("mode", CORRECTION_MODES)
@pytest.mark.parametrize("shape", [(3, 4), (0, 4)])
def test_empty_mask_gives_zeros_not_nan(mode: str, shape: tuple[int, int]) -> None:
    old, rollout = torch.randn(shape), torch.randn(shape)
    result = compute_rollout_correction(CorrectionSettings(mode=mode), old, rollout, torch.zeros(shape))
    assert torch.equal(result.weights, torch.zeros(shape)) and torch.equal(result.mask, torch.zeros(shape))
    assert all(value == 0.0 for value in result.metrics.values())
    assert mismatch_metrics(old, rollout, torch.zeros(shape)) == {
        "rollout_corr/k3_kl": 0.0,
        "rollout_corr/log_ppl_diff": 0.0,
    }


def test_metrics_on_a_hand_computed_case() -> None:
    # Response 1: r = [2, 1]; response 2: r = [0.5]; response 3 is empty. The padding holds garbage.
    log2 = math.log(2.0)
    rollout = torch.tensor([[-1.0, -2.0, 7.0], [-0.5, 1e4, 3.0], [9.0, 9.0, 9.0]])
    old = torch.tensor([[-1.0 + log2, -2.0, -7.0], [-0.5 - log2, -1e4, 0.0], [1.0, 2.0, 3.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    result = compute_rollout_correction(CorrectionSettings(mode="tis", is_cap=1.5), old, rollout, mask)
    # k3 = r - 1 - log r: (1 - log 2) + 0 + (-0.5 + log 2) = 0.5 over 3 tokens.
    # log_ppl_diff = mean over the 2 non-empty responses of mean_t(rollout - old): (-log 2 / 2 + log 2) / 2.
    expected = {
        "is_ratio_mean": (2.0 + 1.0 + 0.5) / 3,
        "is_ratio_max": 2.0,
        "truncated_share": 1 / 3,
        "masked_share": 0.0,
        "k3_kl": 0.5 / 3,
        "log_ppl_diff": log2 / 4,
    }
    assert result.metrics == pytest.approx({f"rollout_corr/{k}": v for k, v in expected.items()}, rel=1e-6)
    torch.testing.assert_close(result.weights, torch.tensor([[1.5, 1.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    assert mismatch_metrics(old, rollout, mask) == pytest.approx(
        {"rollout_corr/k3_kl": 0.5 / 3, "rollout_corr/log_ppl_diff": log2 / 4}, rel=1e-6
    )


def test_weights_are_float32_and_detached() -> None:
    old, rollout, mask = make_batch(0, extremes=EXTREME_LOG_RATIOS)
    old = old.to(torch.bfloat16).requires_grad_()
    result = compute_rollout_correction(CorrectionSettings(mode="tis"), old, rollout.to(torch.bfloat16), mask.bool())
    assert result.weights.dtype == result.mask.dtype == torch.float32
    assert not result.weights.requires_grad


def test_shape_mismatch_is_refused() -> None:
    with pytest.raises(ValueError, match="must all be"):
        compute_rollout_correction(CorrectionSettings(), torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"mode": "token"}, "mode"),
        ({"is_cap": 0.0}, "is_cap"),
        ({"is_cap": float("nan")}, "is_cap"),
        ({"mask_low": -0.5}, "mask_low"),
        ({"mask_low": 5.0, "mask_high": 5.0}, "mask_low"),
        ({"seq_low": 0.0}, "seq_low"),
        ({"seq_low": 3.0, "seq_high": 2.0}, "seq_low"),
        ({"geo_low": 1.2}, "geo_low"),
    ],
)
def test_validation_names_the_key(changes: dict, key: str) -> None:
    settings = CorrectionSettings(**changes)
    with pytest.raises(ValueError, match=re.escape(f"algorithm.rollout_correction.{key}")):
        settings.validate()
    with pytest.raises(ValueError, match=re.escape(f"rollout_correction.{key}")):
        compute_rollout_correction(settings, torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2))
    with pytest.raises(ValueError, match=re.escape(f"custom.{key}")):
        settings.validate(prefix="custom")


def test_default_settings_are_valid() -> None:
    CorrectionSettings().validate()
    for mode in CORRECTION_MODES:
        CorrectionSettings(mode=mode).validate()


# ---------------------------------------------------------------------------------------------------------------
# Parity with verl 0.9.1 (verl/trainer/ppo/rollout_corr_helper.py)
# ---------------------------------------------------------------------------------------------------------------

VERL_VERSION = "0.9.1"
VERL_HELPER_NAMES = {
    "SAFETY_BOUND",
    "SUPPORTED_ROLLOUT_RS_OPTIONS",
    "TOKEN_LEVEL_ROLLOUT_RS_OPTIONS",
    "_parse_rollout_is_threshold",
    "_parse_rollout_rs_thresholds",
    "compute_rollout_correction_weights",
    "compute_is_metrics",
    "compute_rollout_rejection_mask",
    "compute_rs_metrics",
    "compute_offpolicy_metrics",
}
VERL_TORCH_FUNCTIONAL_NAMES = {"masked_sum", "masked_mean"}


def _top_level_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.FunctionDef):
        return node.name
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def _load_definitions(source: str, filename: str, names: set[str], module: types.ModuleType) -> None:
    """Execute only the top-level definitions `names` of a verl source file, unchanged, into `module`."""
    body = [node for node in ast.parse(source).body if _top_level_name(node) in names]
    missing = names - {_top_level_name(node) for node in body}
    assert not missing, f"verl {VERL_VERSION} {filename} no longer defines {sorted(missing)}"
    exec(compile(ast.Module(body=body, type_ignores=[]), filename, "exec"), module.__dict__)


@pytest.fixture(scope="module")
def verl_091(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> types.ModuleType:
    """verl 0.9.1's rollout-correction functions, run from the source in its wheel.

    rollout_corr_helper.py cannot be imported on its own: at import it pulls in verl.protocol (ray, tensordict),
    verl.trainer.config and verl.workers.config (omegaconf, the engine configs) and verl.utils.torch_functional
    (transformers), though none of the functions compared here use them. So the functions are taken from the file's
    syntax tree and executed unchanged, with `verl_F` a module holding verl's own masked_sum and masked_mean from
    torch_functional.py, the only verl names they call. The wheel is fetched once with pip and kept in pytest's cache
    (.pytest_cache, else a temporary folder); without the package index the tests are skipped.
    """
    name = f"verl-{VERL_VERSION}-wheel"
    pytest_cache = getattr(request.config, "cache", None)  # None with -p no:cacheprovider
    cache = pytest_cache.mkdir(name) if pytest_cache is not None else tmp_path_factory.mktemp(name)
    wheels = sorted(cache.glob(f"verl-{VERL_VERSION}-*.whl"))
    if not wheels:
        command = [sys.executable, "-m", "pip", "download", f"verl=={VERL_VERSION}", "--no-deps", "-d", str(cache)]
        command += ["--only-binary=:all:", "--quiet"]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as error:
            detail = getattr(error, "stderr", None) or str(error)
            pytest.skip(f"cannot fetch the verl {VERL_VERSION} wheel with pip download (needs the index): {detail}")
        wheels = sorted(cache.glob(f"verl-{VERL_VERSION}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        helper_source = wheel.read("verl/trainer/ppo/rollout_corr_helper.py").decode()
        functional_source = wheel.read("verl/utils/torch_functional.py").decode()
    verl_functional = types.ModuleType("verl091_torch_functional")
    verl_functional.torch = torch
    _load_definitions(
        functional_source, "verl/utils/torch_functional.py", VERL_TORCH_FUNCTIONAL_NAMES, verl_functional
    )
    helper = types.ModuleType("verl091_rollout_corr_helper")
    helper.__dict__.update(torch=torch, math=math, Optional=Optional, Any=Any, verl_F=verl_functional)
    _load_definitions(helper_source, "verl/trainer/ppo/rollout_corr_helper.py", VERL_HELPER_NAMES, helper)
    return helper


def parity_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """No empty response and no log-ratio beyond +-20, where verl and we differ on purpose (see the module)."""
    return make_batch(seed, lengths=(8, 5, 1, 3, 7, 2, 6, 4), extremes=EXTREME_LOG_RATIOS)


def _verl_weights(verl: types.ModuleType, old, rollout, mask, level: str, threshold: str | float) -> torch.Tensor:
    weights, _ = verl.compute_rollout_correction_weights(old - rollout, mask, level, threshold)
    return weights


def _verl_rejection_mask(verl: types.ModuleType, old, rollout, mask, option: str, low: float, high: float):
    # verl's k1 bounds "a_b" apply to pi_rollout / pi_old, the reciprocal of our ratio bounds.
    rs_mask, _ = verl.compute_rollout_rejection_mask(old - rollout, mask, option, f"{1 / high!r}_{1 / low!r}")
    return rs_mask


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["tis", "icepop", "seq_is", "seq_mis", "geo_rs"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_parity_with_verl(verl_091: types.ModuleType, mode: str, seed: int) -> None:
    old, rollout, mask = parity_batch(seed)
    s = CorrectionSettings(mode=mode, is_cap=1.5, seq_low=0.6, seq_high=1.8, geo_low=0.88, geo_high=1.12)
    result = compute_rollout_correction(s, old, rollout, mask)
    expected_mask = mask
    if mode == "tis":
        expected_weights = _verl_weights(verl_091, old, rollout, mask, "token", s.is_cap)
    elif mode == "icepop":
        expected_weights = _verl_weights(verl_091, old, rollout, mask, "token", f"{s.mask_low}_{s.mask_high}")
    elif mode == "seq_is":
        expected_weights = _verl_weights(verl_091, old, rollout, mask, "sequence", s.is_cap)
    elif mode == "seq_mis":  # verl's Seq-MIS preset: rollout_is="sequence" + rollout_rs="seq_sum_k1"
        expected_mask = _verl_rejection_mask(verl_091, old, rollout, mask, "seq_sum_k1", s.seq_low, s.seq_high)
        expected_weights = _verl_weights(verl_091, old, rollout, mask, "sequence", s.is_cap) * expected_mask
    else:  # geo_rs, verl's Geo-RS preset: rollout_rs="seq_mean_k1" without IS weights
        expected_mask = _verl_rejection_mask(verl_091, old, rollout, mask, "seq_mean_k1", s.geo_low, s.geo_high)
        expected_weights = expected_mask
    if mode in ("seq_mis", "geo_rs"):
        kept = expected_mask.sum(-1) > 0
        assert 0 < kept.sum() < mask.shape[0], "the batch should have kept and rejected sequences"
    torch.testing.assert_close(result.mask, expected_mask, rtol=0, atol=0)
    torch.testing.assert_close(result.weights, expected_weights, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_mismatch_metrics_parity_with_verl(verl_091: types.ModuleType, seed: int) -> None:
    old, rollout, mask = parity_batch(seed)
    expected = verl_091.compute_offpolicy_metrics(old, rollout, mask)
    ours = mismatch_metrics(old, rollout, mask)
    assert ours["rollout_corr/k3_kl"] == pytest.approx(expected["k3_kl"], rel=1e-4, abs=1e-6)
    assert ours["rollout_corr/log_ppl_diff"] == pytest.approx(expected["log_ppl_diff"], rel=1e-5, abs=1e-6)
