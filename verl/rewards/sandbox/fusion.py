# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A remote code sandbox: Sandbox Fusion's HTTP `/run_code` service (`isolation="sandbox_fusion"`). One POST per
case (with the wall and memory limits; isolation and other limits are the service's), mapped to SandboxResult. A
request it cannot serve is retried, then raises SandboxUnavailable: a broken service stops training, not scores 0.
"""

import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from verl.rewards.sandbox.limits import STDERR_TAIL_BYTES, SandboxLimits, SandboxResult, SandboxUnavailable


ATTEMPTS = 3
"""Tries per request before the service is declared unavailable."""


def _post(endpoint: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    url = endpoint.rstrip("/") + "/run_code"
    body = json.dumps(payload).encode("utf-8")
    error: Exception | None = None
    for attempt in range(ATTEMPTS):
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (a configured URL)
                reply = json.loads(response.read().decode("utf-8"))
            if reply.get("status") == "SandboxError":
                raise RuntimeError(f"the service answered SandboxError: {reply.get('message', '')!r:.300}")
            return reply
        except (OSError, ValueError, RuntimeError, urllib.error.URLError) as exc:
            error = exc
            time.sleep(0.2 * 2**attempt)
    raise SandboxUnavailable(
        f"Sandbox Fusion at {url} did not run a program after {ATTEMPTS} tries ({type(error).__name__}: {error}); "
        "check the reward function's sandbox_endpoint keyword (worker.reward.reward_function_kwargs, or its route's "
        "or rubric part's kwargs) and that the service is up."
    )


def _status(run: dict[str, Any] | None) -> tuple[str, int]:
    """(SandboxResult status, return code) for one run result of the service."""
    if run is None:  # nothing ran: the service refused the request itself
        return "error", 1
    state = run.get("status")
    code = run.get("return_code")
    if state == "TimeLimitExceeded":
        return "timeout", -9 if code is None else int(code)
    if state == "Finished" and code == 0:
        return "ok", 0
    code = 1 if code is None else int(code)
    if "MemoryError" in (run.get("stderr") or ""):
        return "memory_limit", code
    return "error", code


def run_case(code: str, stdin: str, limits: SandboxLimits) -> SandboxResult:
    """Run `code` once with `stdin` on the service named by limits.endpoint; a SandboxResult."""
    payload = {
        "code": code,
        "language": "python",
        "stdin": stdin,
        "run_timeout": float(limits.wall_s),
        "compile_timeout": float(limits.wall_s),
        "memory_limit_MB": int(limits.memory_mb),
    }
    started = time.monotonic()
    reply = _post(limits.endpoint, payload, timeout=limits.wall_s + 30.0)
    run = reply.get("run_result")
    status, returncode = _status(run)
    stdout = ((run or {}).get("stdout") or "").encode("utf-8")
    stderr = (run or {}).get("stderr") or (reply.get("message", "") if run is None else "")
    if len(stdout) >= limits.output_kb * 1024:
        status, stdout = "output_limit", stdout[: limits.output_kb * 1024]
    return SandboxResult(
        status=status,
        returncode=returncode,
        stdout_bytes=stdout,
        stderr=stderr[-STDERR_TAIL_BYTES:],
        wall_s=float((run or {}).get("execution_time") or time.monotonic() - started),
        cpu_s=float((run or {}).get("cpu_time") or 0.0),
        sandbox_id=uuid.uuid4().hex,
    )
