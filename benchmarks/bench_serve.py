# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Concurrent chat requests: `python -m verl.serve` against vLLM's own OpenAI server on the same tiny model.

Each server is started alone (fp32, eager, its engine in the server's process, the same KV cache), warmed up, then
sent each `--concurrent` count of chat requests at once (greedy, `--max-tokens` each, distinct prompts) `--rounds`
times; the figure is the median wall time of a round, from the first request sent to the last reply read. A server
that answered one request at a time would take about that count times its single-request latency, also reported.

    OMP_NUM_THREADS=1 python benchmarks/bench_serve.py [--concurrent 20,100 --max-tokens 16 --rounds 5]

The last line printed is one JSON object with the figures.
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import httpx

from verl.utils.cli import positive, positive_ints


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(command: list[str], env: dict[str, str], url: str, log_path: str) -> subprocess.Popen:
    """Start a server in its own session and wait until `url`/models answers."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{command[2]} exited with {proc.returncode}: {open(log_path).read()[-3000:]}")
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop(proc)
    raise RuntimeError(f"{command[2]} did not answer within 600 s; see {log_path}.")


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def chat(client: httpx.Client, url: str, index: int, max_tokens: int) -> dict[str, Any]:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": f"Count to {index}."}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    response = client.post(f"{url}/chat/completions", json=body, timeout=600)
    if response.is_error:  # the server's own words (a too long --max-tokens is a 400 naming the context)
        try:
            said = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            said = response.text[:1000]
        raise RuntimeError(f"{url} answered {response.status_code}: {said}")
    return response.json()


def round_trip(url: str, concurrent: int, max_tokens: int) -> float:
    """Wall seconds for `concurrent` requests sent at once, each on its own connection."""
    barrier, errors = threading.Barrier(concurrent + 1), []

    def send(index: int) -> None:
        with httpx.Client() as client:
            barrier.wait()
            try:
                reply = chat(client, url, index, max_tokens)
                if reply["usage"]["completion_tokens"] != max_tokens:
                    errors.append(f"request {index} got {reply['usage']['completion_tokens']} tokens")
            except Exception as error:  # reported after the round
                errors.append(f"request {index}: {error}")

    threads = [threading.Thread(target=send, args=(index,)) for index in range(concurrent)]
    for thread in threads:
        thread.start()
    barrier.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed: {errors[:3]}")
    return elapsed


def measure(name: str, command: list[str], env: dict[str, str], url: str, args: argparse.Namespace) -> dict:
    log_path = os.path.join(tempfile.gettempdir(), f"bench_serve_{name}.log")
    began = time.perf_counter()
    proc = start(command, env, url, log_path)
    started = time.perf_counter() - began
    try:
        with httpx.Client() as client:
            for _ in range(2):  # warm-up
                chat(client, url, 0, args.max_tokens)
            single = statistics.median(
                _timed(lambda: chat(client, url, 1, args.max_tokens)) for _ in range(args.rounds)
            )
        figures: dict[str, Any] = {"start_s": started, "single_s": single}
        print(f"{name:>5}: one request alone {single:.3f} s, started in {started:.0f} s", flush=True)
        for concurrent in args.concurrent:
            round_trip(url, concurrent, args.max_tokens)  # warm-up at the batch size
            rounds = [round_trip(url, concurrent, args.max_tokens) for _ in range(args.rounds)]
            figures[str(concurrent)] = {"concurrent_s": statistics.median(rounds), "rounds_s": rounds}
            print(
                f"{name:>5}: {concurrent} concurrent requests in {statistics.median(rounds):.3f} s (median of "
                f"{args.rounds}; rounds {', '.join(f'{value:.3f}' for value in rounds)})",
                flush=True,
            )
    finally:
        stop(proc)
    return figures


def _timed(call: Any) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--concurrent", type=positive_ints, default=[20, 100], help="counts of requests sent at once, comma-separated"
    )
    parser.add_argument("--max-tokens", type=positive(int), default=16)
    parser.add_argument("--rounds", type=positive(int), default=5)
    parser.add_argument("--kv-cache-mb", type=int, default=64)
    parser.add_argument("--model-root", default=os.path.join(tempfile.gettempdir(), "bench_serve_models"))
    parser.add_argument("--sides", default="ours,vllm", help="which servers to measure, comma-separated")
    args = parser.parse_args(argv)
    if not set(args.sides.split(",")) <= {"ours", "vllm"}:
        parser.error(f"--sides takes a comma-separated subset of ours,vllm, got {args.sides!r}.")

    from verl.models.tiny_models import get_or_build_tiny_model

    model = get_or_build_tiny_model("qwen2", args.model_root)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    env.setdefault("OMP_NUM_THREADS", "1")
    common = ["--model", model, "--served-model-name", "tiny", "--max-model-len", "512"]
    results: dict[str, Any] = {"concurrent": args.concurrent, "max_tokens": args.max_tokens, "rounds": args.rounds}
    sides = args.sides.split(",")
    if "ours" in sides:
        port = free_port()
        command = [sys.executable, "-m", "verl.serve", *common, "--port", str(port), "--kv-cache-mb"]
        results["ours"] = measure("ours", [*command, str(args.kv_cache_mb)], env, f"http://127.0.0.1:{port}/v1", args)
    if "vllm" in sides:
        port = free_port()
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *common, "--port", str(port)]
        command += ["--host", "127.0.0.1", "--dtype", "float32", "--enforce-eager", "--seed", "0"]
        command += ["--kv-cache-memory-bytes", str(args.kv_cache_mb * 2**20)]
        results["vllm"] = measure("vllm", command, env, f"http://127.0.0.1:{port}/v1", args)
    if "ours" in results and "vllm" in results:
        results["ratio"] = {}
        for count in map(str, args.concurrent):
            ratio = results["ours"][count]["concurrent_s"] / results["vllm"][count]["concurrent_s"]
            results["ratio"][count] = ratio
            print(f"ours / vLLM's server, {count} concurrent requests: {ratio:.2f}x", flush=True)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
