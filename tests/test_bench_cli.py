# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The benchmarks' counts are checked by argparse: a zero or negative one is one line naming the option, before
anything starts (they were tracebacks after a model was built, or figures of 0 tok/s with exit status 0)."""

import json
import os
import subprocess
import sys

import pytest


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
    "script, option",
    [
        ("bench_serve", "--max-tokens"),
        ("bench_lora_rollout", "--prompts"),
        ("bench_lora_rollout", "--rank"),
        ("bench_sft_data", "--repeats"),
        ("bench_data", "--rows"),
        ("bench_rollout", "--n"),
        ("bench_sweep", "--runs"),
        ("bench_sweep", "--steps"),
        ("bench_sandbox", "--workers"),
        ("bench_driver", "--prompts"),
        ("bench_episodes", "--prompts"),
        ("bench_async", "--repeats"),
        ("bench_async", "--n"),
    ],
)
def test_a_count_below_one_is_refused_naming_the_option(script, option):
    command = [sys.executable, os.path.join(REPO, "benchmarks", f"{script}.py"), option, "0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == f"{script}.py: error: argument {option}: must be positive, got 0"


@pytest.mark.parametrize("sft", [False, True])
def test_the_data_benchmark_builds_the_prompt_set_in_each_way(sft):
    command = [sys.executable, os.path.join(REPO, "benchmarks", "bench_data.py"), "--rows", "300", "--workers", "1,2"]
    result = subprocess.run(command + ["--sft"] * sft, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.splitlines()[-1])
    # the SFT check has no key: 300 rows are one process's, whatever the cores
    assert [(name, row["processes"]) for name, row in figures.items()] == [("1", 1), ("2", 1 if sft else 2)]
    assert all(row["seconds"] > 0 for row in figures.values())


def test_the_driver_benchmark_times_its_functions():
    command = [sys.executable, os.path.join(REPO, "benchmarks", "bench_driver.py"), "--prompts", "4", "--n", "2"]
    command += ["--prompt-length", "8", "--response-length", "16", "--repeats", "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["function"] for row in rows] == ["join_rollout", "gae", "discounted_returns"]
    assert all(row["rows"] == 8 and row["seconds"] >= 0 for row in rows)


def test_a_request_the_server_refuses_is_reported_in_the_servers_words():
    """bench_serve's request refused by the server (a --max-tokens beyond the context) names the server's reason; it
    was httpx's generic "Client error '400 Bad Request'" with a link to MDN."""
    import http.server
    import importlib.util
    import json
    import threading

    import httpx

    reason = "max_tokens=600 is more than the 500 tokens the context has left after the prompt"

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"error": {"message": reason, "type": "BadRequestError", "code": 400}}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    spec = importlib.util.spec_from_file_location("bench_serve", os.path.join(REPO, "benchmarks", "bench_serve.py"))
    bench_serve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_serve)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        with httpx.Client() as client, pytest.raises(RuntimeError) as refused:
            bench_serve.chat(client, url, 0, 600)
    finally:
        server.shutdown()
    assert str(refused.value) == f"{url} answered 400: {reason}"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the error of a machine without a GPU")
def test_an_unavailable_device_and_a_bad_parts_list_are_named_with_the_benchmarks_own_options():
    """bench_actor --device cuda without a GPU said `set trainer.device=cpu`, a key it does not have; bench_lora_rollout
    advised `--parts both`, which it refuses."""
    for script, args, message in (
        (
            "bench_actor",
            ["--device", "cuda"],
            "--device cuda, and torch sees no CUDA device in this process; use --dev",
        ),
        ("bench_lora_rollout", ["--parts", "all"], "give generation, sync or generation,sync"),
    ):
        command = [sys.executable, os.path.join(REPO, "benchmarks", f"{script}.py"), *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert result.returncode == 2 and message in result.stderr.splitlines()[-1], result.stderr[-2000:]
