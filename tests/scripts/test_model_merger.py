# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""scripts/model_merger.py: its options, the dtype it writes, and how a failed Hub upload is reported.

The checkpoint is a tiny model written with torch.distributed.checkpoint in one process, in the layout the trainer
uses (`model.<name>` keys, Hugging Face files under `huggingface/`). No test reaches the Hub: this machine may
have no network, and an upload is never faked as a success.
"""

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import warnings

import pytest
import torch


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "model_merger.py")


def _load_script():
    spec = importlib.util.spec_from_file_location("model_merger", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


merger = _load_script()


def run_merger(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )


def hub_env(tmp_path, **extra: str) -> dict[str, str]:
    """An environment with no Hub token anywhere (HF_HOME holds the token file) unless `extra` sets HF_TOKEN."""
    env = {key: value for key, value in os.environ.items() if key not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_HUB_DISABLE_TELEMETRY="1", **extra)
    return env


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[str, dict[str, torch.Tensor]]:
    """(actor checkpoint directory, the fp32 weights in it)."""
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM

    from verl.models.tiny_models import build_tiny_model
    from verl.utils import quiet

    root = tmp_path_factory.mktemp("merger")
    model_dir = build_tiny_model(
        str(root / "model"), hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=128
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    weights = {key: value.clone() for key, value in model.state_dict().items()}
    actor = root / "global_step_1" / "actor"
    with quiet.one_process_checkpoint_io():
        dcp.save({"model": model.state_dict()}, checkpoint_id=str(actor), no_dist=True)
    shutil.copytree(model_dir, actor / "huggingface", ignore=shutil.ignore_patterns("*.safetensors"))
    return str(actor), weights


def read_merged(directory: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = [name for name in os.listdir(directory) if name.endswith(".safetensors")]
    assert files, f"no safetensors in {directory}"
    merged: dict[str, torch.Tensor] = {}
    for name in files:
        merged.update(load_file(os.path.join(directory, name)))
    return merged


def test_help_is_fast_and_imports_no_torch() -> None:
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{SCRIPT!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_path({SCRIPT!r}, run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('imported:', sorted(m for m in ('torch', 'transformers', 'huggingface_hub') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--hf_upload_path" in proc.stdout and "(default: bf16)" in proc.stdout
    assert "A checkpoint is trusted input" in proc.stdout  # DCP metadata is a pickle: users are told
    assert "imported: []" in proc.stdout


@pytest.mark.parametrize("value, expected", [("bf16", "bfloat16"), ("fp16", "float16"), ("float32", "float32")])
def test_dtype_names(value: str, expected: str) -> None:
    assert merger.torch_dtype_name(value) == expected


def test_unknown_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="--dtype 'int8' is not one of bf16, fp16, fp32"):
        merger.torch_dtype_name("int8")
    proc = run_merger("--local_dir", "unused", "--dtype", "int8")
    assert proc.returncode == 2 and "invalid choice: 'int8'" in proc.stderr


def test_default_is_bf16_and_fp32_is_exact(checkpoint, tmp_path, monkeypatch) -> None:
    import torch.distributed.checkpoint as dcp

    actor, weights = checkpoint
    reads, read_metadata = [], dcp.FileSystemReader.read_metadata
    monkeypatch.setattr(dcp.FileSystemReader, "read_metadata", lambda self: reads.append(1) or read_metadata(self))
    merger._read_checkpoint_index.cache_clear()
    default = read_merged(merger.merge(actor, str(tmp_path / "bf16")))
    assert len(reads) == 2  # the critic check, the shape check and the allocation share one read; dcp.load its own
    exact = read_merged(merger.merge(actor, str(tmp_path / "fp32"), dtype="fp32"))
    assert set(default) == set(exact) and "model.embed_tokens.weight" in default
    for key, tensor in default.items():
        assert tensor.dtype == torch.bfloat16, key
        assert torch.equal(tensor, weights[key].to(torch.bfloat16)), key
        assert exact[key].dtype == torch.float32 and torch.equal(exact[key], weights[key]), key
    assert os.path.isfile(tmp_path / "bf16" / "tokenizer_config.json")  # the trainer's files are copied along
    # the checkpoint's config.json (fp32 master weights) is not copied over the export's: each declares what it holds
    for folder, dtype in (("bf16", "bfloat16"), ("fp32", "float32")):
        with open(tmp_path / folder / "config.json") as f:
            assert json.load(f)["dtype"] == dtype, folder


def test_a_lora_merge_adds_the_scaled_adapters_and_writes_the_dtype_asked_for(checkpoint, tmp_path) -> None:
    import torch.distributed.checkpoint as dcp

    from verl.utils import quiet

    actor, weights = checkpoint
    base = os.path.join(os.path.dirname(os.path.dirname(actor)), "model")  # the fixture's model folder
    lora = tmp_path / "global_step_1" / "actor"
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 64, generator=generator) / 8, torch.randn(64, 8, generator=generator) / 8
    prefix = "model.layers.0.self_attn.q_proj"
    with quiet.one_process_checkpoint_io():
        dcp.save(
            {"model": {f"{prefix}.lora_A.default.weight": a, f"{prefix}.lora_B.default.weight": b}},
            checkpoint_id=str(lora),
            no_dist=True,
        )
    shutil.copytree(os.path.join(actor, "huggingface"), lora / "huggingface")
    config = {"base_model_name_or_path": base, "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}
    (lora / "adapter_config.json").write_text(json.dumps(config))
    expected = weights["model.layers.0.self_attn.q_proj.weight"] + 2.0 * (b @ a)  # lora_alpha / r = 2
    for dtype, torch_dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        merged = read_merged(merger.merge(str(lora), str(tmp_path / dtype), dtype=dtype))
        assert {tensor.dtype for tensor in merged.values()} == {torch_dtype}, dtype
        q_proj = merged["model.layers.0.self_attn.q_proj.weight"]
        torch.testing.assert_close(q_proj, expected.to(torch_dtype), rtol=0, atol=1e-6 if dtype == "fp32" else 1e-2)
        assert torch.equal(
            merged["model.layers.0.self_attn.k_proj.weight"],
            weights["model.layers.0.self_attn.k_proj.weight"].to(torch_dtype),
        )


def test_adapters_alone_are_refused_for_a_base_model_of_other_weights_as_a_merge_is(
    checkpoint, tmp_path, monkeypatch
) -> None:
    """--adapter_only named any --base_model (or a run's model_path that now holds other weights) in the adapter
    config without a check, where the merge refuses it: peft and vLLM then put the adapters on weights they were not
    trained on, and nothing said so. A relative --base_model was written as given, which peft's AutoPeftModel reads
    from the folder it runs in (or as a Hub id of that name)."""
    import torch.distributed.checkpoint as dcp

    from verl.utils import quiet
    from verl.utils.hub import weights_fingerprint

    actor, _ = checkpoint
    base = os.path.join(os.path.dirname(os.path.dirname(actor)), "model")  # the fixture's model folder
    other = tmp_path / "other"  # the same shapes, other weights (an instruct version, a later fine-tune)
    shutil.copytree(base, other)
    (other / "model.safetensors").write_bytes((other / "model.safetensors").read_bytes()[:-4] + b"\x00" * 4)
    lora = tmp_path / "global_step_1" / "actor"
    prefix = "model.layers.0.self_attn.q_proj"
    with quiet.one_process_checkpoint_io():
        dcp.save(
            {
                "model": {
                    f"{prefix}.lora_A.default.weight": torch.ones(8, 64),
                    f"{prefix}.lora_B.default.weight": torch.ones(64, 8),
                }
            },
            checkpoint_id=str(lora),
            no_dist=True,
        )
    shutil.copytree(os.path.join(actor, "huggingface"), lora / "huggingface")
    config = {"base_model_name_or_path": base, "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}
    (lora / "adapter_config.json").write_text(json.dumps(config))
    state = {"trainer": "rl", "global_step": 1, "model_fingerprint": weights_fingerprint(base)}
    (lora.parent / "trainer_state.json").write_text(json.dumps(state))
    for base_model in (str(other), None):  # named on the command line; the run's model_path, since overwritten
        if base_model is None:
            (lora / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(other)}))
        target = tmp_path / f"adapter_{base_model is None}"
        with pytest.raises(ValueError, match="were trained on other weights than the base model"):
            merger.merge(str(lora), str(target), adapter_only=True, base_model=base_model)
        assert not os.path.exists(target / "adapter_config.json")
    monkeypatch.chdir(os.path.dirname(base))
    written = merger.merge(str(lora), str(tmp_path / "adapter"), adapter_only=True, base_model="model")
    assert json.loads(open(os.path.join(written, "adapter_config.json")).read())["base_model_name_or_path"] == base


def test_an_earlier_sharded_exports_index_is_not_copied_along(checkpoint, tmp_path) -> None:
    """The side files copied beside an export skipped only *.safetensors: an earlier sharded export's index in the
    checkpoint's folder went along, and vLLM refused the single-file folder (weights in the index but missing)."""
    actor, _ = checkpoint
    step = tmp_path / "global_step_1"
    shutil.copytree(os.path.dirname(actor), step)
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}
    (step / "actor" / "huggingface" / "model.safetensors.index.json").write_text(json.dumps(index))
    merger.merge(str(step / "actor"), str(tmp_path / "out"), dtype="fp32")
    assert not (tmp_path / "out" / "model.safetensors.index.json").exists()
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_a_target_holding_weights_is_refused_and_the_checkpoints_own_is_replaced(checkpoint, tmp_path) -> None:
    """Files of another model in --target_dir stayed beside the export's (an old shard; an adapter_config.json that
    made the folder load as an adapter): refused, naming them, and nothing written. The default target's are an
    earlier export of the same checkpoint: replaced, not mixed."""
    actor, weights = checkpoint
    target = tmp_path / "out"
    target.mkdir()
    (target / "adapter_config.json").write_text("{}")
    (target / "model-00002-of-00002.safetensors").write_bytes(b"old")
    with pytest.raises(ValueError, match=r"already holds adapter_config.json, model-00002-of-00002.safetensors"):
        merger.merge(actor, str(target))
    assert sorted(os.listdir(target)) == ["adapter_config.json", "model-00002-of-00002.safetensors"]
    other = tmp_path / "other"  # another model's config and tokenizer, no weights: they were overwritten
    other.mkdir()
    (other / "config.json").write_text("{}")
    (other / "tokenizer_config.json").write_text("{}")
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"already holds config.json, tokenizer_config.json, which the export would"):
        merger.merge(actor, str(other))
    assert (other / "config.json").read_text() == "{}"
    step = tmp_path / "global_step_1"
    shutil.copytree(os.path.dirname(actor), step)
    own = step / "actor" / "huggingface"
    (own / "model-00001-of-00002.safetensors").write_bytes(b"an earlier export's shard")
    merged = read_merged(merger.merge(str(step / "actor"), None, dtype="fp32"))
    assert not (own / "model-00001-of-00002.safetensors").exists() and torch.equal(
        merged["model.embed_tokens.weight"], weights["model.embed_tokens.weight"]
    )


def test_merging_says_nothing_of_process_groups_unless_verbose(checkpoint, tmp_path, monkeypatch) -> None:
    """torch warns at every checkpoint load in one process, even one that asks for one process (no_dist=True): the
    merger silences that message alone, and VERL_VERBOSE=1 shows it again."""
    actor, _ = checkpoint
    shown = {}
    for verbose in ("0", "1"):
        monkeypatch.setenv("VERL_VERBOSE", verbose)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            merger.merge(actor, str(tmp_path / f"verbose_{verbose}"), dtype="fp32")
        shown[verbose] = [str(w.message) for w in caught if "torch.distributed is" in str(w.message)]
    assert shown["0"] == []
    assert any("assuming the intent is to load in a single process" in message for message in shown["1"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--hf_upload_path", "user/model"], "needs a Hugging Face token and none is configured"),
        (["--hf_upload_path", "not a/valid//name"], "is not a Hub repository name"),
        (["--hf_private"], "--hf_private needs --hf_upload_path"),
    ],
)
def test_upload_arguments_are_checked_before_merging(tmp_path, args: list[str], message: str) -> None:
    # The checkpoint directory does not exist: the upload target is checked first, so its error is the one shown.
    proc = run_merger("--local_dir", str(tmp_path / "missing"), *args, env=hub_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not os.path.exists(tmp_path / "missing")


def test_failed_upload_is_an_error_that_keeps_the_merged_model(checkpoint, tmp_path) -> None:
    actor, _ = checkpoint
    with socket.socket() as sock:  # a port nothing listens on: the connection is refused at once
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
    target = tmp_path / "merged"
    env = hub_env(tmp_path, HF_TOKEN="hf_not_a_real_token", HF_ENDPOINT=endpoint)
    proc = run_merger("--local_dir", actor, "--target_dir", str(target), "--hf_upload_path", "user/model", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Uploaded" not in proc.stdout
    assert f"Uploading {target} to the Hugging Face Hub repository 'user/model' failed" in proc.stderr
    assert f"the merged model stays in {target}" in proc.stderr
    assert read_merged(str(target))


def test_a_target_that_cannot_be_written_is_one_line_before_the_model_is_built(checkpoint, tmp_path) -> None:
    """It was found when the built and loaded model was saved (minutes and the model's size in memory later)."""
    actor, _ = checkpoint
    (tmp_path / "a_file").write_text("")
    for target, reason in (
        (tmp_path / "a_file" / "merged", f"which cannot be created: '{tmp_path / 'a_file'}' is a file"),
        (tmp_path / "a_file", "which is a file"),
    ):
        proc = run_merger("--local_dir", actor, "--target_dir", str(target))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert f"--target_dir '{target}', {reason}; give a writable directory." in proc.stderr
        assert "should be a directory" not in proc.stderr  # (transformers' warning as it saved: not reached)


@pytest.mark.skipif(os.geteuid() != 0, reason="as another user the access check refuses /proc before the export")
def test_a_target_folder_the_system_cannot_make_is_one_line(checkpoint) -> None:
    """As root, a folder under /proc passes the access check, and making it fails after the model was built: that
    read "model_merger: [Errno 2] No such file or directory: '/proc/merged'", as a checkpoint file that is missing."""
    actor, _ = checkpoint
    proc = run_merger("--local_dir", actor, "--target_dir", "/proc/verl-merged")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot write /proc/verl-merged: No such file or directory; choose another --target_dir." in proc.stderr


def test_lora_options_on_a_full_checkpoint_are_refused(checkpoint, tmp_path) -> None:
    actor, _ = checkpoint
    for flag in (["--adapter_only"], ["--base_model", str(tmp_path)]):
        proc = run_merger("--local_dir", actor, "--target_dir", str(tmp_path / "out"), *flag)
        assert (
            proc.returncode == 2
            and f"is not a LoRA checkpoint (no adapter_config.json); drop {flag[0]}." in proc.stderr
        )


def test_a_lora_checkpoint_whose_base_is_a_hub_id_goes_offline_when_the_hub_cannot_be_reached(checkpoint, tmp_path):
    """huggingface_hub retried each file of the base model with back-off (minutes on a machine without network, 2.5
    minutes in one test) before the merger said it cannot be loaded: it goes offline at once, as the trainer does."""
    import torch.distributed.checkpoint as dcp

    from verl.utils import quiet

    actor, _ = checkpoint
    lora = tmp_path / "global_step_1" / "actor"
    adapters = {"model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(8, 64)}
    with quiet.one_process_checkpoint_io():
        dcp.save({"model": adapters}, checkpoint_id=str(lora), no_dist=True)
    shutil.copytree(os.path.join(actor, "huggingface"), lora / "huggingface")
    config = {"base_model_name_or_path": "Org/Model", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}
    (lora / "adapter_config.json").write_text(json.dumps(config))
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    env = {key: value for key, value in hub_env(tmp_path, HF_ENDPOINT=endpoint).items() if key != "HF_HUB_OFFLINE"}
    env = {key: value for key, value in env.items() if "proxy" not in key.lower()}
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--local_dir", str(lora), "--target_dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Org/Model load from the local cache only" in proc.stderr and "Retrying" not in proc.stderr
    assert "The base model 'Org/Model' cannot be loaded" in proc.stderr


def test_an_easyr1_checkpoint_is_named_as_such(tmp_path) -> None:
    actor = tmp_path / "global_step_5" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    for rank in range(2):
        torch.save({}, actor / f"model_world_size_2_rank_{rank}.pt")
    proc = run_merger("--local_dir", str(actor))
    assert proc.returncode != 0
    assert "is an EasyR1 (or verl) checkpoint" in proc.stderr and "model_world_size_2_rank_0.pt" in proc.stderr
    assert "Traceback" not in proc.stderr
    with pytest.raises(FileNotFoundError, match="is a step directory; pass its actor checkpoint"):
        merger.merge(str(actor.parent))
    (tmp_path / "global_step_10" / "actor").mkdir(parents=True)
    newest = re.escape(str(tmp_path / "global_step_10" / "actor"))
    with pytest.raises(
        FileNotFoundError, match=f"a run's save directory \\(2 steps saved\\); .* the newest: {newest}\\."
    ):
        merger.merge(str(tmp_path))


def test_a_step_whose_save_was_interrupted_is_named_and_the_newest_step_with_an_actor_suggested(tmp_path) -> None:
    """A save killed before its actor/ was renamed into place leaves global_step_N with actor.tmp (and perhaps the
    critic): the run folder's hint named that step's missing actor/, which then was "not a checkpoint directory"."""
    (tmp_path / "global_step_2" / "actor").mkdir(parents=True)
    interrupted = tmp_path / "global_step_3"
    for name in ("actor.tmp", "critic"):
        (interrupted / name).mkdir(parents=True)
    complete = re.escape(str(tmp_path / "global_step_2" / "actor"))
    with pytest.raises(FileNotFoundError, match=f"\\(2 steps saved\\); .* the newest: {complete}\\.$"):
        merger.merge(str(tmp_path))
    for given in (interrupted, interrupted / "actor"):  # the step, or the actor its save never put in place
        proc = run_merger("--local_dir", str(given))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert (
            f"'{interrupted}' is a step directory without an actor checkpoint (its save was interrupted" in proc.stderr
        )
        assert re.search(f"export another step's, such as the newest: {complete}\\.$", proc.stderr.strip())
    shutil.rmtree(tmp_path / "global_step_2")
    with pytest.raises(FileNotFoundError, match="\\(1 step saved\\), and none holds an actor checkpoint"):
        merger.merge(str(tmp_path))
    (interrupted / "actor.tmp").rmdir()
    with pytest.raises(FileNotFoundError, match="no actor/ in it\\); no step beside it has one\\.$"):
        merger.merge(str(interrupted))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        merger.merge(str(tmp_path / "elsewhere"))
    staging = interrupted / "actor.tmp"  # given itself, with the .metadata a save writes before it is renamed
    staging.mkdir()
    (staging / ".metadata").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="is the staging folder of a save that never finished"):
        merger.merge(str(staging))


def test_a_critic_checkpoint_is_named_as_such(tmp_path, monkeypatch) -> None:
    import torch.distributed.checkpoint as dcp

    from verl.models.config import ModelConfig
    from verl.models.loading import build_model
    from verl.models.tiny_models import build_tiny_model
    from verl.utils import quiet

    model_dir = build_tiny_model(str(tmp_path / "model"), hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2)
    critic = tmp_path / "global_step_1" / "critic"
    model = build_model(ModelConfig(model_path=model_dir), value_head=True)
    with quiet.one_process_checkpoint_io():
        dcp.save({"model": model.state_dict()}, checkpoint_id=str(critic), no_dist=True)
    shutil.copytree(model_dir, critic / "huggingface", ignore=shutil.ignore_patterns("*.safetensors"))
    result = run_merger("--local_dir", str(critic), "--target_dir", str(tmp_path / "out"))
    assert result.returncode != 0
    assert f"'{critic}' holds a critic (value head); export the actor's checkpoint instead." in result.stderr
    assert "Traceback" not in result.stderr
    # refused from the checkpoint's index alone: no model of the critic's size is built on the host first
    monkeypatch.setattr(merger, "model_class", lambda config: pytest.fail("a model was built for a critic"))
    with pytest.raises(ValueError, match="holds a critic"):
        merger.merge(str(critic))


def test_an_actor_whose_lm_head_has_a_bias_is_no_critic(tmp_path) -> None:
    """Only a one-row lm_head with a bias is this project's value head; a language model's biased head exports."""
    import torch.distributed.checkpoint as dcp

    from verl.utils import quiet

    for rows in (1, 8):
        step = tmp_path / str(rows)
        with quiet.one_process_checkpoint_io():
            state = {"lm_head.weight": torch.zeros(rows, 4), "lm_head.bias": torch.zeros(rows)}
            dcp.save({"model": state}, checkpoint_id=str(step), no_dist=True)
        if rows == 1:
            with pytest.raises(ValueError, match="holds a critic"):
                merger.check_not_a_critic(str(step))
        else:
            merger.check_not_a_critic(str(step))


def test_a_truncated_shard_is_named_by_the_merger(checkpoint, tmp_path) -> None:
    from verl.utils.checkpoint.integrity import write_record

    actor, _ = checkpoint
    step = tmp_path / "global_step_1"
    shutil.copytree(os.path.dirname(actor), step)
    write_record(str(step))  # as the trainer's save does
    shard = next(step.glob("actor/*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    proc = run_merger("--local_dir", str(step / "actor"), "--target_dir", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert f"Checkpoint '{step / 'actor'}' is damaged: {shard} is 100 bytes, truncated from the" in proc.stderr
    assert "Traceback" not in proc.stderr
    # the actor folder copied alone (the record stays in the step folder): a traceback from inside DCP's reader
    copied = tmp_path / "copied_actor"
    shutil.copytree(step / "actor", copied)
    proc = run_merger("--local_dir", str(copied), "--target_dir", str(tmp_path / "out2"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"Checkpoint '{copied}' cannot be read (" in proc.stderr and "missing or truncated" in proc.stderr


@pytest.mark.parametrize(
    "damaged, content, message",
    [
        (".metadata", b"", "/.metadata' cannot be read (EOFError"),  # a traceback from check_not_a_critic
        (".metadata", b"garbage\n", "/.metadata' cannot be read ("),  # "invalid literal for int()", no file named
        ("huggingface/config.json", b"{garbage", "/huggingface/config.json' is not valid JSON (Expecting property"),
        ("huggingface/config.json", b"[1]", "/huggingface/config.json' holds no JSON object"),
    ],
)
def test_a_damaged_index_or_config_without_an_integrity_record_is_named(
    checkpoint, tmp_path, damaged, content, message
) -> None:
    """A step's actor folder copied without its integrity record, with a damaged file the record would have named."""
    actor, _ = checkpoint
    copied = tmp_path / "actor"
    shutil.copytree(actor, copied)
    (copied / damaged).write_bytes(content)
    proc = run_merger("--local_dir", str(copied), "--target_dir", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"{copied}{message}" in proc.stderr


def test_a_config_that_does_not_fit_the_checkpoint_is_named(checkpoint, tmp_path) -> None:
    """An edited huggingface/config.json (another size, an unknown model type): a 'size mismatch' RuntimeError
    traceback, or transformers' paragraphs that never named the file."""
    actor, _ = checkpoint
    for edit, message in (
        ({"intermediate_size": 96}, r"does not match its huggingface/config.json \(\d+ tensor\(s\); model.layers.0"),
        ({"model_type": "nosuchmodel"}, r"has model_type 'nosuchmodel', which transformers .* does not know"),
    ):
        copied = tmp_path / f"actor_{len(edit)}_{next(iter(edit))}"
        shutil.copytree(actor, copied)
        config = json.loads((copied / "huggingface" / "config.json").read_text())
        (copied / "huggingface" / "config.json").write_text(json.dumps({**config, **edit}))
        with pytest.raises(ValueError, match=message):
            merger.merge(str(copied), str(tmp_path / f"out_{next(iter(edit))}"))


def test_an_export_into_the_checkpoint_keeps_its_step_intact(checkpoint, tmp_path) -> None:
    """The default target is the step's own actor/huggingface/, whose config files the export rewrites (the
    weights' dtype): the step's integrity record follows, so the step still resumes and merges again."""
    from verl.utils.checkpoint.integrity import damage, write_record

    actor, _ = checkpoint
    step = tmp_path / "global_step_1"
    shutil.copytree(os.path.dirname(actor), step)
    generation = step / "actor" / "huggingface" / "generation_config.json"
    saved = {**json.loads(generation.read_text()), "eos_token_id": [2050, 2049], "do_sample": True, "temperature": 0.7}
    generation.write_text(json.dumps(saved))  # the model's stop tokens and sampling defaults
    write_record(str(step))  # as the trainer's save does
    for _ in range(2):
        assert run_merger("--local_dir", str(step / "actor")).returncode == 0
        assert damage(str(step)) is None
    assert (step / "actor" / "huggingface" / "model.safetensors").is_file()
    exported = json.loads(generation.read_text())  # kept (it was rewritten from config.json: one stop token)
    assert exported["eos_token_id"] == [2050, 2049] and exported["temperature"] == 0.7
    # the export's weights are no part of the checkpoint: removed (copied elsewhere, the space freed), the step is
    # intact (it read as damaged: a run resumed from the step before, and the merger refused it)
    (step / "actor" / "huggingface" / "model.safetensors").unlink()
    assert damage(str(step)) is None


def test_an_export_through_a_link_to_the_checkpoint_keeps_its_step_intact(checkpoint, tmp_path) -> None:
    """--local_dir a link to a step's actor folder (a `latest` symlink): the export rewrote the step's config files
    but recorded them beside the link, so the step read as damaged and a run resumed from the step before it."""
    from verl.utils.checkpoint.integrity import damage, write_record

    actor, _ = checkpoint
    step = tmp_path / "run" / "global_step_1"
    shutil.copytree(os.path.dirname(actor), step)
    write_record(str(step))  # as the trainer's save does
    (tmp_path / "latest").symlink_to(step / "actor")
    written = merger.merge(str(tmp_path / "latest"))
    assert damage(str(step)) is None and (step / "actor" / "huggingface" / "model.safetensors").is_file()
    assert written == str(step / "actor" / "huggingface")  # named as the folder it is


def test_a_failed_export_into_the_checkpoint_leaves_the_step_as_it_was(checkpoint, tmp_path, monkeypatch) -> None:
    """The disk filling while the weights are written: the export wrote into huggingface/ in place, so the step's
    rewritten config.json read as damaged and the next run resumed from the step before (and later deleted this one).
    Now the step's files are untouched and nothing of the export is left."""
    import errno

    import transformers.modeling_utils

    from verl.utils.checkpoint.integrity import damage, write_record

    actor, _ = checkpoint
    step = tmp_path / "global_step_1"
    shutil.copytree(os.path.dirname(actor), step)
    write_record(str(step))
    before = {path.name: path.read_bytes() for path in (step / "actor" / "huggingface").iterdir()}

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full_disk)
    with pytest.raises(OSError, match="No space left"):
        merger.merge(str(step / "actor"))
    assert damage(str(step)) is None
    assert {path.name: path.read_bytes() for path in (step / "actor" / "huggingface").iterdir()} == before
    assert sorted(os.listdir(step / "actor")) == sorted(os.listdir(actor))  # no staging folder left


def test_an_earlier_export_is_kept_until_a_new_one_replaces_it(checkpoint, tmp_path, monkeypatch) -> None:
    """The earlier export in huggingface/ was deleted before the merger checked its flags (`--base_model` on a full
    model's checkpoint) or wrote anything: a refused or failed merge left the step with no exported weights."""
    import errno

    import transformers.modeling_utils

    from verl.utils.checkpoint.integrity import damage, write_record

    actor, _ = checkpoint
    step = tmp_path / "global_step_1"
    shutil.copytree(os.path.dirname(actor), step)
    merger.merge(str(step / "actor"))  # the earlier export
    write_record(str(step))
    hf = step / "actor" / "huggingface"
    before = {path.name: path.read_bytes() for path in hf.iterdir()}
    assert "model.safetensors" in before
    with pytest.raises(ValueError, match="is not a LoRA checkpoint"):
        merger.merge(str(step / "actor"), base_model=str(tmp_path))

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(transformers.modeling_utils, "safe_save_file", full_disk)
        with pytest.raises(OSError, match="No space left"):
            merger.merge(str(step / "actor"))
    assert {path.name: path.read_bytes() for path in hf.iterdir()} == before and damage(str(step)) is None
    merger.merge(str(step / "actor"))  # and a merge that goes through replaces it
    assert damage(str(step)) is None and (hf / "model.safetensors").is_file()


def test_a_merged_model_vllm_cannot_load_as_written_gets_a_note_naming_the_keys(tmp_path) -> None:
    """LLaVA-OneVision as transformers 5 saves it (what the merger writes): the note names the tower's keys and the
    call that lets vLLM load them; a model vLLM loads as written gets none."""
    from verl.models.tiny_models import get_or_build_tiny_model

    note = merger.engine_loading_note(get_or_build_tiny_model("llava_onevision", str(tmp_path)))
    assert note is not None and "'vision_tower.vision_model.*'" in note and "load_transformers_tower_names" in note
    assert "vision_tower.encoder." in note
    assert merger.engine_loading_note(get_or_build_tiny_model("qwen2", str(tmp_path))) is None


def test_a_model_of_its_own_code_is_saved_with_it_and_exports_with_trust_remote_code(tmp_path) -> None:
    """A model whose config.json names its own code (auto_map): the checkpoint's huggingface/ had its configuration
    file but not its modeling file, and the merger had no way to run it (transformers asked y/N in a terminal)."""
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM

    from verl.models.tiny_models import build_tiny_model
    from verl.utils import quiet
    from verl.utils.checkpoint import FSDPCheckpointManager

    source = tmp_path / "myq"
    build_tiny_model(str(source), hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=128)
    (source / "configuration_myq.py").write_text(
        "from transformers import Qwen2Config\n\n\nclass MyQConfig(Qwen2Config):\n    model_type = 'myq'\n"
    )
    (source / "modeling_myq.py").write_text(
        "from transformers import Qwen2ForCausalLM\n\nfrom .configuration_myq import MyQConfig\n\n\n"
        "class MyQForCausalLM(Qwen2ForCausalLM):\n    config_class = MyQConfig\n"
    )
    config = json.loads((source / "config.json").read_text())
    config.update(
        model_type="myq",
        architectures=["MyQForCausalLM"],
        auto_map={"AutoConfig": "configuration_myq.MyQConfig", "AutoModelForCausalLM": "modeling_myq.MyQForCausalLM"},
    )
    (source / "config.json").write_text(json.dumps(config))
    model = AutoModelForCausalLM.from_pretrained(str(source), trust_remote_code=True, dtype=torch.float32)
    actor = tmp_path / "global_step_1" / "actor"
    with quiet.one_process_checkpoint_io():
        dcp.save({"model": model.state_dict()}, checkpoint_id=str(actor), no_dist=True)
    FSDPCheckpointManager(model)._save_hf_files(str(actor))  # the side files a save writes
    assert {"configuration_myq.py", "modeling_myq.py"} <= set(os.listdir(actor / "huggingface"))
    target = tmp_path / "export"
    refused = run_merger("--local_dir", str(actor), "--target_dir", str(target))
    assert refused.returncode == 2 and "pass --trust_remote_code to run it" in refused.stderr
    done = run_merger("--local_dir", str(actor), "--target_dir", str(target), "--dtype", "fp32", "--trust_remote_code")
    assert done.returncode == 0, done.stderr
    exported = AutoModelForCausalLM.from_pretrained(str(target), trust_remote_code=True, dtype=torch.float32)
    assert type(exported).__name__ == "MyQForCausalLM"
    for name, value in model.state_dict().items():
        assert torch.equal(exported.state_dict()[name], value), name


def test_a_chatml_base_models_export_stops_at_the_end_of_a_turn(tmp_path) -> None:
    """A base model whose EOS is `<|endoftext|>` (Qwen2.5-7B), trained on its ChatML template, whose turns end with
    `<|im_end|>`: the rollout stops there, but the export kept the base's generation_config.json, and transformers'
    generate (or vLLM) serving the export went on past `<|im_end|>`, writing the next turns. The checkpoint's side
    files (which the merger exports) now stop at both, the base's EOS first."""
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from verl.models.tiny_models import build_tiny_model
    from verl.utils import quiet
    from verl.utils.checkpoint import FSDPCheckpointManager

    base = tmp_path / "base"
    build_tiny_model(str(base), hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=128)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    end_of_text, im_end = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    tokenizer.eos_token = "<|endoftext|>"
    tokenizer.save_pretrained(str(base))
    GenerationConfig(eos_token_id=end_of_text).save_pretrained(str(base))  # the base's: EOS alone
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    actor = tmp_path / "global_step_1" / "actor"
    with quiet.one_process_checkpoint_io():
        dcp.save({"model": model.state_dict()}, checkpoint_id=str(actor), no_dist=True)
    FSDPCheckpointManager(model, tokenizer=AutoTokenizer.from_pretrained(str(base)))._save_hf_files(str(actor))
    assert model.generation_config.eos_token_id == end_of_text  # the live model's own is left as it was
    done = run_merger("--local_dir", str(actor), "--target_dir", str(tmp_path / "export"), "--dtype", "fp32")
    assert done.returncode == 0, done.stderr
    assert GenerationConfig.from_pretrained(str(tmp_path / "export")).eos_token_id == [end_of_text, im_end]
    # an instruct model's generation config, which stops at <|im_end|> already, is written as it was
    instruct = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    instruct.generation_config.eos_token_id = [im_end, end_of_text]
    FSDPCheckpointManager(instruct, tokenizer=tokenizer)._save_hf_files(str(tmp_path / "instruct"))
    written = GenerationConfig.from_pretrained(str(tmp_path / "instruct" / "huggingface"))
    assert written.eos_token_id == [im_end, end_of_text]
