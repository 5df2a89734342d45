# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`verifiers` (0.4) tasksets through verl.envs.verifiers_env: exported as training data, run by
`python -m verl.envs.evaluate` against a scripted OpenAI-compatible endpoint (the messages sent and the scores equal to
verifiers' own run of the same replies, tool calls executed by verifiers' tool server), refused with errors that say
what to fix (another taskset than the one named, an environment for older verifiers, task data that does not match
the taskset) and trained one GRPO step with the tiny model."""

import asyncio
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


vf = pytest.importorskip("verifiers.v1", reason="verifiers is not installed (pip install -e '.[verifiers]')")

from verl.envs import evaluate  # noqa: E402
from verl.envs.loader import EnvironmentLoadError, load_environment  # noqa: E402
from verl.envs.verifiers_env import TASK_COLUMN, VerifiersEnv, rubric_reward, task_messages  # noqa: E402
from verl.envs.verifiers_env import main as verifiers_main  # noqa: E402


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REWARD = os.path.join(REPO, "verl", "envs", "verifiers_env.py") + ":rubric_reward"
SUM = os.path.join(REPO, "examples", "envs", "verifiers_sum.py") + ":SumTaskset"  # a taskset with a tool

ARITH = """
import re

import verifiers.v1 as vf


class ArithData(vf.TaskData):
    answer: str


class ArithTask(vf.Task[ArithData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        found = re.search(r"<answer>(.*?)</answer>", trace.last_reply or "", re.S)
        return float(found is not None and found.group(1).strip() == self.data.answer)

    @vf.reward(weight=0.25)
    async def format(self, trace: vf.Trace) -> float:
        return float(re.fullmatch(r"\\s*<answer>.*</answer>\\s*", trace.last_reply or "", re.S) is not None)

    @vf.reward(weight=0.1)
    async def length(self, trace: vf.Trace) -> float:
        return min(len(trace.last_reply or ""), 100) / 100

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply or ""))


class ArithTaskset(vf.Taskset[ArithTask, vf.TasksetConfig]):
    def load(self):
        for a, b in ((2, 3), (4, 4), (1, 6), (5, 2)):
            data = ArithData(prompt=f"What is {a} + {b}?", answer=str(a + b), system_prompt="Answer in <answer></answer>.")
            yield ArithTask(data, self.config.task)


__all__ = ["ArithTaskset"]
"""

PROBE = """
import re

import verifiers.v1 as vf


class ProbeData(vf.TaskData):
    answer: str


class ProbeTask(vf.Task[ProbeData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        found = re.search(r"<answer>(.*?)</answer>", trace.last_reply or "", re.S)
        return float(found is not None and found.group(1).strip() == self.data.answer)

    @vf.reward(weight=0.5)
    async def repeats_question(self, trace: vf.Trace) -> float:  # reads the task's prompt, as a judge would
        return float(self.data.prompt_text.strip() in (trace.last_reply or ""))

    @vf.metric
    async def has_system_prompt(self, trace: vf.Trace) -> float:
        return float(self.data.system_prompt == "Answer in <answer></answer>.")

    @vf.metric
    async def first_message_is_system(self, trace: vf.Trace) -> float:
        return float(bool(trace.messages) and trace.messages[0].role == "system")

    @vf.metric
    async def prompt_chars(self, trace: vf.Trace) -> float:
        return float(len(self.data.prompt_text))


class ProbeTaskset(vf.Taskset[ProbeTask, vf.TasksetConfig]):
    def load(self):
        for a, b in ((2, 3), (4, 4)):
            data = ProbeData(prompt=f"What is {a} + {b}?", answer=str(a + b), system_prompt="Answer in <answer></answer>.")
            yield ProbeTask(data, self.config.task)


class OtherTaskset(vf.Taskset[ProbeTask, vf.TasksetConfig]):
    def load(self):
        yield ProbeTask(ProbeData(prompt="What is 1 + 1?", answer="2"), self.config.task)


__all__ = ["ProbeTaskset"]
"""

CLASSIC = """
import verifiers as vf


def load_environment(**kwargs):
    return vf.SingleTurnEnv(dataset=None, system_prompt="Think, then answer.")
"""


def _call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class ScriptedEndpoint:
    """An OpenAI-compatible chat endpoint on 127.0.0.1: the n-th reply of a conversation is `script[key][n]`, `key`
    being the script key found in its system and user messages. A reply is text, or (name, arguments) for a tool
    call the endpoint's parser took out of the text. Streams (SSE) when asked; keeps every request."""

    def __init__(self, script):
        self.script, self.requests = script, []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(body)
                data, kind = endpoint.reply(body)
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def reply(self, body):
        messages = body["messages"]
        said = " ".join(str(m.get("content")) for m in messages if m["role"] in ("system", "user"))
        (key,) = [key for key in self.script if key in said]
        reply = self.script[key][sum(m["role"] == "assistant" for m in messages)]
        if isinstance(reply, tuple):
            call = {
                "id": "call_7",
                "type": "function",
                "function": {"name": reply[0], "arguments": json.dumps(reply[1])},
            }
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": reply}, "stop"
        raw = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        }
        if not body.get("stream"):
            return json.dumps(raw).encode(), "application/json"
        delta = (
            {**message, "tool_calls": [{**call, "index": 0} for call in message["tool_calls"]]}
            if finish == "tool_calls"
            else message
        )
        chunk = {**raw, "object": "chat.completion.chunk"}
        chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
        return f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode(), "text/event-stream"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def tasksets(tmp_path_factory):
    """The two taskset files and their exported datasets (the export command's output)."""
    root = tmp_path_factory.mktemp("verifiers")
    (root / "vf_arith_v1.py").write_text(ARITH)
    (root / "vf_probe_v1.py").write_text(PROBE)
    paths = {"root": root, "arith": f"{root / 'vf_arith_v1.py'}:ArithTaskset", "tools": SUM}
    paths["probe"] = f"{root / 'vf_probe_v1.py'}:ProbeTaskset"
    for name in ("arith", "tools", "probe"):
        assert verifiers_main(["export", "--env", paths[name], "--output", str(root / f"{name}.jsonl")]) == 0
    return paths


def rows(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def run_evaluate(tmp_path, capsys, env, data, url, *options):
    output = tmp_path / "episodes.jsonl"
    argv = ["--env", env, "--data", str(data), "--base-url", url, "--model", "m", "--reward", REWARD]
    assert evaluate.main([*argv, "--output", str(output), *options]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return lines[:-1], lines[-1], rows(output)


def verifiers_own_run(env, idx, url):
    """(rewards by name, total) of task `idx` run by verifiers itself against `url` (verifiers_trace)."""
    trace = verifiers_trace(env, idx, url)
    return {name: reward.score for name, reward in trace.rewards.items()}, trace.reward


def verifiers_trace(env, idx, url):
    """The trace of task `idx` run by verifiers itself against `url`: its env and eval client, the harness's requests
    going straight to the endpoint (the task's own system message, no verl in between)."""
    vf_env = env.new_env()
    (task,) = [task for task in vf_env.taskset if task.data.idx == idx]
    context = vf.ModelContext(model="m", client=vf.EvalClientConfig(base_url=url, api_key_var="VERL_TEST_UNSET"))

    async def run():
        async with vf_env.serving():
            return await vf_env.run_episode(task, context)

    episode = asyncio.run(run())
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    return trace


def test_the_export_writes_the_taskset_as_training_rows(tasksets):
    """`export` rows: the prompt as the messages verifiers' chat harness sends (the system prompt as a system
    message; the user's text alone where that is all), the answer, the task data; the two ways to name a taskset,
    and the errors of a row without task data, an unknown taskset and retries."""
    arith, tools = rows(tasksets["root"] / "arith.jsonl"), rows(tasksets["root"] / "tools.jsonl")
    system = {"role": "system", "content": "Answer in <answer></answer>."}
    assert [row["prompt"] for row in arith][:2] == [
        [system, {"role": "user", "content": "What is 2 + 3?"}],
        [system, {"role": "user", "content": "What is 4 + 4?"}],
    ]
    assert [row["answer"] for row in arith] == ["5", "8", "7", "7"]
    assert [row["answer"] for row in tools][:2] == ["23", "44"] and tools[0]["prompt"] == "Add 20 and 3 with the tool."
    task = json.loads(arith[1][TASK_COLUMN])
    assert task["idx"] == 1 and task["answer"] == "8" and task["system_prompt"] == "Answer in <answer></answer>."
    env = load_environment(tasksets["arith"])
    assert isinstance(env, VerifiersEnv) and env.tool_schemas() is None  # no tools: nothing to probe
    assert env.reset(arith[0])["task_data"] == json.loads(arith[0][TASK_COLUMN])
    with pytest.raises(ValueError, match=f"no '{TASK_COLUMN}' column .* verl.envs.verifiers_env export"):
        env.reset({"prompt": "What is 2 + 3?", "ground_truth": "5"})
    with pytest.raises(EnvironmentLoadError, match=r"worker.rollout.env='verifiers:no_such_taskset_v1'.*not found"):
        load_environment("verifiers:no_such_taskset_v1")
    with pytest.raises(EnvironmentLoadError, match="retries are set; a retried rollout"):
        load_environment(tasksets["arith"], {"agent": {"retries": {"max_retries": 2}}})
    # a taskset named by id (importable: its folder is on the path now), its config block in env_kwargs
    assert load_environment("verifiers:vf_arith_v1", {"taskset": {}}).config.taskset.id == "vf_arith_v1"


def test_the_exports_bad_options_are_one_line_and_an_earlier_export_survives_a_failed_one(tasksets, tmp_path, capsys):
    """--limit -1 emptied an existing --output, then failed naming islice; an --output under a file and bad
    --env-kwargs were tracebacks or did not name the option."""
    earlier = tasksets["root"] / "arith.jsonl"
    before = earlier.read_text()
    (tmp_path / "afile").write_text("")
    for options, message in (
        (["--output", str(earlier), "--limit", "-1"], "argument --limit: must be positive, got -1"),
        (["--output", str(tmp_path / "afile" / "x.jsonl")], "x.jsonl', whose folder is a file"),
        (["--output", str(earlier), "--env-kwargs", "{bad"], "--env-kwargs is not JSON"),
        (["--output", str(earlier), "--env-kwargs", "[]"], "--env-kwargs must be a JSON object"),
    ):
        with pytest.raises(SystemExit) as exit_code:
            verifiers_main(["export", "--env", tasksets["arith"], *options])
        assert exit_code.value.code == 2 and message in capsys.readouterr().err
    assert earlier.read_text() == before
    with pytest.raises(SystemExit, match="export: "):  # a taskset that fails: the earlier file stays whole
        verifiers_main(["export", "--env", tasksets["arith"], "--output", str(earlier), "--env-kwargs", '{"x": 1}'])
    assert earlier.read_text() == before
    # --output naming the taskset's own .py file replaced it with the tasks (exit 0)
    source = tasksets["arith"].rpartition(":")[0]
    text = open(source).read()
    with pytest.raises(SystemExit) as exit_code:
        verifiers_main(["export", "--env", tasksets["arith"], "--output", source])
    assert exit_code.value.code == 2 and "is the --env file: it would be overwritten" in capsys.readouterr().err
    assert open(source).read() == text
    # a folder that does not exist yet is made (it failed naming a hidden temporary file)
    assert verifiers_main(["export", "--env", tasksets["arith"], "--output", str(tmp_path / "new" / "a.jsonl")]) == 0
    assert (tmp_path / "new" / "a.jsonl").read_text()


def test_unsupported_prompts_and_a_missing_package_are_refused(tasksets, monkeypatch):
    """A prompt of messages (few-shot turns) goes as they are, after the system prompt; one that does not end with
    the user's, none, or images are refused."""
    shots = [vf.UserMessage(content="1 + 1?"), vf.AssistantMessage(content="2"), vf.UserMessage(content="2 + 2?")]
    assert task_messages(vf.TaskData(idx=2, prompt=shots, system_prompt="Be brief.")) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1 + 1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "2 + 2?"},
    ]
    data = vf.TaskData(idx=3, prompt=[vf.UserMessage(content="a"), vf.AssistantMessage(content="b")])
    with pytest.raises(NotImplementedError, match=r"task 3: a prompt of messages \['user', 'assistant'\]"):
        task_messages(data)
    with pytest.raises(NotImplementedError, match="task 4 has no prompt"):
        task_messages(vf.TaskData(idx=4))
    picture = vf.ImageUrlContentPart(image_url=vf.ImageUrlSource(url="data:image/png;base64,AAAA"))
    with pytest.raises(NotImplementedError, match="content parts other than text"):
        task_messages(vf.TaskData(idx=5, prompt=[vf.UserMessage(content=[picture])]))
    monkeypatch.setitem(sys.modules, "verifiers.v1", None)  # as if verifiers were not installed
    with pytest.raises(EnvironmentLoadError, match=r"verifiers:vf_arith_v1.*pip install -e '\.\[verifiers\]'"):
        load_environment("verifiers:vf_arith_v1")


def test_a_single_turn_taskset_is_evaluated_and_scored_as_verifiers_scores_it(tasksets, tmp_path, capsys):
    """The scripted replies of two tasks through `verl.envs.evaluate`; the rewards are those verifiers' own run of
    the same replies gives, and rubric_reward returns them."""
    script = {"What is 2 + 3?": ["<answer>5</answer>"], "What is 4 + 4?": ["It is <answer>9</answer>, I think."]}
    data = tmp_path / "two.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows(tasksets["root"] / "arith.jsonl")[:2]))
    endpoint = ScriptedEndpoint(script)
    try:
        episodes, summary, records = run_evaluate(tmp_path, capsys, tasksets["arith"], data, endpoint.url)
        sent = list(endpoint.requests)
        env = load_environment(tasksets["arith"])
        own = [verifiers_own_run(env, idx, endpoint.url) for idx in (0, 1)]
    finally:
        endpoint.close()
    lengths = [len(replies[0]) for replies in script.values()]  # 18 and 34 characters
    assert [record["scores"] for record in records] == [
        {"overall": pytest.approx(1.25 + 0.1 * 0.18), "correct": 1.0, "format": 1.0, "length": 0.18},
        {"overall": pytest.approx(0.1 * 0.34), "correct": 0.0, "format": 0.0, "length": 0.34},
    ]
    assert [episode["metric_reply_chars"] for episode in episodes] == lengths
    for episode, record, (rewards, total) in zip(episodes, records, own):
        assert {key: record["scores"][key] for key in rewards} == rewards and record["reward"] == total
        assert episode["reward"] == total and episode["reward_correct"] == rewards["correct"]
        assert record["env"]["turns"] == 1 and record["done"] is True
    assert summary["reward/overall/mean"] == pytest.approx(0.651) and summary["reward_format/mean"] == 0.5
    # one request per episode: the exported prompt's messages, as verifiers sends them; the evaluation's sampling
    assert [request["messages"] for request in sent] == [row["prompt"] for row in rows(data)]
    assert all(r["max_tokens"] == 256 and r["temperature"] == 0.0 and "tools" not in r for r in sent)
    assert records[0]["messages"][-1] == {"role": "assistant", "content": "<answer>5</answer>"}


def test_the_model_is_sent_the_tasks_system_message_and_scored_as_in_verifiers_own_run(tasksets, tmp_path, capsys):
    """A task with a system prompt: the model gets [system, user] as verifiers' own run sends them (not one user
    message with the system prompt folded in), and rewards and metrics that read the task's data (its prompt, its
    system prompt) or the trace's first message score as in verifiers' own run of the same replies. Where
    --format-prompt (data.format_prompt) rewrites the user's text, the harness sends the rewritten text after the
    task's system message, and the task's prompt is that text."""
    script = {"What is 2 + 3?": ["What is 2 + 3? <answer>5</answer>"], "What is 4 + 4?": ["<answer>8</answer>"]}
    data = tasksets["root"] / "probe.jsonl"
    template = tmp_path / "format.jinja"
    template.write_text("{{ content }} Show your work.")
    endpoint = ScriptedEndpoint(script)
    try:
        episodes, _, records = run_evaluate(tmp_path, capsys, tasksets["probe"], data, endpoint.url)
        sent = list(endpoint.requests)
        endpoint.requests.clear()
        env = load_environment(tasksets["probe"])
        own = [verifiers_trace(env, idx, endpoint.url) for idx in (0, 1)]
        own_sent = list(endpoint.requests)
        endpoint.requests.clear()
        formatted, _, _ = run_evaluate(
            tmp_path, capsys, tasksets["probe"], data, endpoint.url, "--format-prompt", str(template)
        )
    finally:
        endpoint.close()
    system = {"role": "system", "content": "Answer in <answer></answer>."}
    assert [request["messages"] for request in sent] == [request["messages"] for request in own_sent]
    assert sent[0]["messages"] == [system, {"role": "user", "content": "What is 2 + 3?"}]
    for episode, record, trace in zip(episodes, records, own):
        assert record["reward"] == trace.reward and episode["reward"] == trace.reward
        assert {key: episode[f"reward_{key}"] for key in trace.rewards} == {
            key: reward.score for key, reward in trace.rewards.items()
        }
        assert {key: episode[f"metric_{key}"] for key in trace.metrics} == trace.metrics
    assert [episode["reward"] for episode in episodes] == [1.5, 1.0]  # 1.0 and 1.0 with the system prompt folded in
    assert episodes[0]["metric_first_message_is_system"] == 1.0 and episodes[0]["metric_has_system_prompt"] == 1.0
    # --format-prompt: the rewritten text, after the task's own system message; the task's prompt is that text
    text = "What is 2 + 3? Show your work."
    assert endpoint.requests[0]["messages"] == [system, {"role": "user", "content": text}]
    assert formatted[0]["metric_prompt_chars"] == len(text) and formatted[0]["metric_has_system_prompt"] == 1.0
    assert formatted[0]["reward_repeats_question"] == 0.0 and formatted[0]["reward_correct"] == 1.0


def test_a_taskset_other_than_the_one_named_or_an_older_verifiers_environment_is_refused(tasksets, tmp_path):
    """The file's `__all__` exports one taskset, the one verifiers loads: naming another is refused (it ran the
    exported one before), in training, evaluation and export; an environment written for older verifiers (a
    `load_environment()` function) gets what is supported."""
    path = tasksets["probe"].rpartition(":")[0]
    named = r"the taskset named is OtherTaskset, but the file exports ProbeTaskset in its `__all__`"
    with pytest.raises(EnvironmentLoadError, match=named):
        load_environment(f"{path}:OtherTaskset")
    with pytest.raises(SystemExit, match="export: .*" + named):
        verifiers_main(["export", "--env", f"{path}:OtherTaskset", "--output", str(tmp_path / "other.jsonl")])
    assert not (tmp_path / "other.jsonl").exists()
    with pytest.raises(
        EnvironmentLoadError, match="has no taskset named 'ProbeTaskSet'; its tasksets: ProbeTaskset, Oth"
    ):
        load_environment(f"{path}:ProbeTaskSet")
    (tmp_path / "classic_env.py").write_text(CLASSIC)
    supported = (
        r"has an environment for older verifiers \(its `load_environment\(\)`\); only verifiers 0.4 tasksets are "
        r"supported: `path/to/taskset.py:TasksetClass` .* or `verifiers:<taskset id>`"
    )
    for name in ("load_environment", "SingleTurnEnv"):
        with pytest.raises(EnvironmentLoadError, match=supported):
            load_environment(f"{tmp_path / 'classic_env.py'}:{name}")


def test_a_row_whose_task_data_does_not_match_the_taskset_is_refused_naming_the_field(tasksets, tmp_path, capsys):
    """A row's task data without a field the taskset's data class requires: reset refuses it, naming the field and
    the export command (a pydantic error from inside the episode before), in evaluation as in training."""
    row = rows(tasksets["root"] / "probe.jsonl")[0]
    task = json.loads(row[TASK_COLUMN])
    del task["answer"]
    row[TASK_COLUMN] = json.dumps(task)
    data = tmp_path / "no_answer.jsonl"
    data.write_text(json.dumps(row) + "\n")
    refused = (
        r"verifiers taskset '.*vf_probe_v1.py': the row's 'verifiers_task' does not match the taskset's data class "
        r"ProbeData: it has no 'answer' .* write the dataset again with `python -m verl.envs.verifiers_env export "
        r"--env .*vf_probe_v1.py:ProbeTaskset --output FILE`\.$"
    )
    with pytest.raises(ValueError, match=refused):
        load_environment(tasksets["probe"]).reset(row)
    with pytest.raises(
        SystemExit,
        match=r"^evaluate: row 0: VerifiersEnv \(--env\): reset raised EnvRowError for the "
        r"row: " + refused,
    ):
        run_evaluate(tmp_path, capsys, tasksets["probe"], data, "http://127.0.0.1:9/v1")


def test_training_rows_without_the_tasks_data_are_refused_before_any_worker_naming_the_file_and_row(
    tasksets, tmp_path
):
    """A validation set that is not the taskset's export (the base config's math set, or a row that lost its task
    data) is refused as the run's inputs are checked, before Ray starts, naming the key, the file and the row; it
    failed at the first validation inside every worker, after the engines had started (or steps into the run)."""
    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.trainer import runner
    from verl.trainer.config import load_config

    root = tasksets["root"]
    model = get_or_build_tiny_model("qwen2", str(root / "models"))
    val = tmp_path / "val.jsonl"
    val_rows = rows(root / "arith.jsonl")[:3]
    del val_rows[1][TASK_COLUMN]
    val.write_text("".join(json.dumps(row) + "\n" for row in val_rows))
    args = train_args(root, "task_rows", tasksets["arith"], root / "arith.jsonl", model, f"data.val_files={val}")
    with pytest.raises(ValueError, match=r"data.val_files: .*val.jsonl'?, row 1: verifiers taskset .* has no "):
        runner._prepare_inputs(load_config(args))
    args = train_args(root, "task_rows", tasksets["arith"], root / "arith.jsonl", model)
    assert runner._prepare_inputs(load_config(args))[1] is not None  # the export itself passes


def test_a_tool_call_runs_in_verifiers_tool_server_and_its_result_is_in_the_next_request(tasksets, tmp_path, capsys):
    """A tool call the model writes as text (as the engine gives it in training) and one the endpoint parsed both
    reach verifiers' harness as calls; its MCP tool server computes them and the next request carries the result
    after the turn as the model wrote it. The scores are those of verifiers' own run of the same replies from an
    endpoint that parses tool calls (as verl.serve and vLLM's hermes parser do)."""
    text_call = _call("calc_add", a=20, b=3)
    parsed_call = ("calc_add", {"a": 20, "b": 3})
    script = {
        "Add 20 and 3": [text_call, "<answer>23</answer>"],
        "Add 4 and 40": [("calc_add", {"a": 4, "b": 40}), "44"],
    }
    endpoint, reference = (
        ScriptedEndpoint(script),
        ScriptedEndpoint({**script, "Add 20 and 3": [parsed_call, "<answer>23</answer>"]}),
    )
    data = tmp_path / "two.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows(tasksets["root"] / "tools.jsonl")[:2]))
    try:
        episodes, summary, records = run_evaluate(tmp_path, capsys, tasksets["tools"], data, endpoint.url)
        env = load_environment(tasksets["tools"])
        own = [verifiers_own_run(env, idx, reference.url) for idx in (0, 1)]
        schemas = env.tool_schemas()
    finally:
        endpoint.close()
        reference.close()
    first, second, _, parsed = endpoint.requests  # the two episodes' requests, in order
    assert schemas == first["tools"] and [tool["function"]["name"] for tool in schemas] == ["calc_add"]
    assert first["messages"] == [{"role": "user", "content": "Add 20 and 3 with the tool."}]
    # the next request: the previous one, the model's turn unchanged (the block as text), the tool's result
    assert second["messages"][:2] == [*first["messages"], {"role": "assistant", "content": text_call}]
    assert second["messages"][2]["role"] == "tool" and second["messages"][2]["content"] == "23"
    parsed = parsed["messages"]
    assert parsed[1]["tool_calls"][0]["function"]["name"] == "calc_add" and parsed[2]["content"] == "44"
    assert [record["scores"] for record in records] == [
        {"overall": 1.5, "correct": 1.0, "used_tool": 1.0},
        {"overall": 0.5, "correct": 0.0, "used_tool": 1.0},
    ]
    for record, (rewards, total) in zip(records, own):
        assert {key: record["scores"][key] for key in rewards} == rewards and record["reward"] == total
    assert [episode["tool_calls"] for episode in episodes] == [1.0, 1.0] and summary["turns/mean"] == 2
    assert [m["role"] for m in records[0]["messages"]] == ["user", "assistant", "tool", "assistant"]
    # the records keep each assistant turn as the model wrote it, its tool call included (as training's records do)
    assert records[0]["messages"][1]["content"] == text_call, records[0]["messages"][1]
    assert '"name": "calc_add"' in records[1]["messages"][1]["content"], records[1]["messages"][1]


def test_an_episode_out_of_turns_ends_and_is_scored_as_far_as_it_went(tasksets, tmp_path, capsys):
    """--max-turns 2: the request after the second tool call is refused (as training refuses a request when
    max_turns or the response budget is spent); verifiers' chat program ends there and the episode is scored on the
    conversation the model saw: the first tool result counts, the second (never sent) does not."""
    call = _call("calc_add", a=20, b=3)
    endpoint = ScriptedEndpoint({"Add 20 and 3": [call, call, "<answer>23</answer>"]})
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps(rows(tasksets["root"] / "tools.jsonl")[0]) + "\n")
    try:
        episodes, _, records = run_evaluate(
            tmp_path, capsys, tasksets["tools"], data, endpoint.url, "--max-turns", "2"
        )
    finally:
        endpoint.close()
    assert len(endpoint.requests) == 2 and episodes[0]["done"] is False and episodes[0]["tool_calls"] == 1.0
    assert records[0]["scores"] == {"overall": 0.5, "correct": 0.0, "used_tool": 1.0}
    assert [m["role"] for m in records[0]["messages"]] == ["user", "assistant", "tool", "assistant", "tool"]
    assert records[0]["messages"][-1] == {"role": "tool", "content": "23", "cut": True}
    assert records[0]["env"]["cut_tool_messages"] == 1


def test_rubric_reward_returns_the_episode_reward_and_its_parts():
    sample = {"extra_info": {"env_reward": 1.25, "env_reward_correct": 1.0, "env_reward_format": 1.0, "env_turns": 1}}
    assert rubric_reward(sample) == {"overall": 1.25, "correct": 1.0, "format": 1.0}
    with pytest.raises(ValueError, match="no env_reward"):
        rubric_reward({"extra_info": {"env_turns": 1.0}})


# ---------------------------------------------------------------------------------------------------------------
# training


def train_args(root, name, env, data, model, *extra):
    return [
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.max_prompt_length=400",  # the tool taskset's prompts hold its tool (321 tokens)
        "data.max_response_length=32",
        "data.rollout_batch_size=2",
        "worker.actor.global_batch_size=2",
        "worker.actor.micro_batch_size_per_device_for_update=2",
        "worker.actor.micro_batch_size_per_device_for_experience=4",
        f"worker.actor.model.model_path={model}",
        "worker.actor.model.enable_gradient_checkpointing=false",
        "worker.rollout.n=2",
        "worker.rollout.max_num_batched_tokens=512",
        "worker.rollout.kv_cache_memory_mb=32",
        "worker.rollout.enforce_eager=true",
        f"worker.rollout.env={env}",
        "worker.rollout.max_turns=2",
        "worker.rollout.max_tokens_per_turn=8",
        f"worker.reward.reward_function={REWARD}",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",
        "trainer.max_steps=1",
        "trainer.val_before_train=false",
        "trainer.val_freq=-1",
        "trainer.logger=[file]",
        "trainer.project_name=verifiers",
        f"trainer.experiment_name={name}",
        f"trainer.save_checkpoint_path={root / name}",
        *extra,
    ]


class ToolServers:
    """The example taskset's tool server processes (`python -m verifiers_sum`) seen while the block runs."""

    def __enter__(self) -> "ToolServers":
        self.seen: dict[int, str] = {}
        self.parents: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @staticmethod
    def _servers() -> dict[int, tuple[int, str]]:
        """pid -> (parent pid, who started it: the parent's pid and command line, for a failure message)."""
        import psutil

        found = {}
        for process in psutil.process_iter(["pid", "ppid", "cmdline"]):
            cmdline = process.info["cmdline"] or []
            if "-m" in cmdline and "verifiers_sum" in cmdline:
                try:
                    parent = " ".join(psutil.Process(process.info["ppid"]).cmdline())[:200]
                except psutil.Error:
                    parent = "gone"
                found[process.info["pid"]] = (process.info["ppid"], f"started by {process.info['ppid']} ({parent})")
        return found

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            for pid, (ppid, parent) in self._servers().items():
                self.seen.setdefault(pid, parent)
                self.parents.setdefault(pid, ppid)

    def started(self) -> list[int]:
        """The servers started from outside: a process a server forked (which carries its command line until it
        execs, as a subprocess the server runs does) is the server's own, not another server."""
        return [pid for pid in self.seen if self.parents[pid] not in self.seen]

    def alive(self) -> list[int]:
        return [pid for pid in self._servers() if pid in self.seen]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["arith", "tools"])
def test_one_grpo_step_in_a_verifiers_taskset(name, tasksets, local_ray):
    """One GRPO step of the tiny model on the exported tasks, the episodes run by verifiers against the rollout
    engine: the rewards verifiers gave are logged as env/reward*/mean and are the rewards the trainer trained on.
    The tool taskset's prompts hold the tools its harness offers (found by the probe), or the engine would refuse
    the harness's first request."""
    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.trainer.config import load_config
    from verl.trainer.runner import run_ppo

    root = tasksets["root"]
    model = get_or_build_tiny_model("qwen2", str(root / "models"))
    data = root / f"{name}.jsonl"
    steps = 2 if name == "tools" else 1
    with ToolServers() as servers:
        run_ppo(load_config(train_args(root, name, tasksets[name], data, model, f"trainer.max_steps={steps}")))
    if name == "tools":
        # the taskset's shared tool server: the driver's probe for the tool schemas, then one per rollout worker for
        # the whole run (not one per step: 5 over 2 steps), and none left once the run is over (the workers close
        # their environments before they are killed)
        assert 2 <= len(servers.started()) <= 3, servers.seen
        assert servers.alive() == []
    with open(root / name / "experiment_log.jsonl") as f:
        steps = [row for row in map(json.loads, f) if "actor/pg_loss" in row]
    assert [row["step"] for row in steps] == list(range(1, len(steps) + 1)) and steps
    row = steps[0]
    parts = ("correct", "format", "length") if name == "arith" else ("correct", "used_tool")
    assert row["reward/overall"] == pytest.approx(row["env/reward/mean"])
    for part in parts:
        assert row[f"reward/{part}"] == pytest.approx(row[f"env/reward_{part}/mean"])
        assert 0.0 <= row[f"env/reward_{part}/mean"] <= 1.0
    assert row["env/turns/mean"] >= 1 and row["env/metric_reply_chars/mean"] > 0  # the model wrote something
    if name == "arith":  # some characters: a reward above 0, so the step had something to learn from
        assert row["env/reward_length/mean"] == pytest.approx(row["env/metric_reply_chars/mean"] / 100, abs=0.1)
        assert row["reward/overall"] > 0


def test_the_bridge_passes_a_requests_chat_template_kwargs_on_to_the_episodes_client():
    """A harness request's chat_template_kwargs reach the episode's client (which holds them to the run's
    data.chat_template_kwargs in training); a request without them sends none."""
    import asyncio
    from types import SimpleNamespace

    from verl.envs.verifiers_env import Bridge

    sent = []

    async def create(**request):
        sent.append(request)
        message = SimpleNamespace(content="4", tool_calls=None)
        return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop")], usage=None)

    bridge = Bridge(SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create))))
    asked = {"model": "m", "messages": [{"role": "user", "content": "2 + 2?"}]}
    reply = asyncio.run(bridge.ask({**asked, "chat_template_kwargs": {"enable_thinking": False}}))
    assert reply["choices"][0]["message"]["content"] == "4"
    assert sent[-1]["extra_body"] == {"chat_template_kwargs": {"enable_thinking": False}}
    asyncio.run(bridge.ask(asked))
    assert "extra_body" not in sent[-1]


def test_the_harness_gets_a_turns_reasoning_apart_from_its_content_as_from_a_reasoning_parser():
    """In training the engine's text holds the reasoning block; the harness gets it as `reasoning_content` and the
    content after it, as an endpoint with a reasoning parser gives them in evaluation (and to verifiers' own runs),
    so that a reward reading the reply scores the same in both; the next request carries the turn as the model
    wrote it."""
    import asyncio
    from types import SimpleNamespace

    from verl.envs.verifiers_env import Bridge

    texts = ["<think>maybe <answer>4</answer></think>\n\n<answer>5</answer>", "no reasoning here"]

    async def create(**request):
        message = SimpleNamespace(content=texts[len(bridge.turns)], tool_calls=None)
        return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop")], usage=None)

    bridge = Bridge(SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create))))
    asked = [{"role": "user", "content": "2 + 3?"}]
    reply = asyncio.run(bridge.ask({"model": "m", "messages": asked}))["choices"][0]["message"]
    assert reply == {
        "role": "assistant",
        "content": "<answer>5</answer>",
        "reasoning_content": "maybe <answer>4</answer>",
    }
    assert bridge.turns[0] == {"role": "assistant", "content": texts[0]}
    again = [*asked, {"role": "assistant", "content": "<answer>5</answer>"}, {"role": "user", "content": "sure?"}]
    assert bridge.client_messages(again)[1] == {"role": "assistant", "content": texts[0]}
    reply = asyncio.run(bridge.ask({"model": "m", "messages": again}))["choices"][0]["message"]
    assert reply == {"role": "assistant", "content": "no reasoning here"}
