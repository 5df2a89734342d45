# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The remote backend (isolation="sandbox_fusion") against a local HTTP server that speaks Sandbox Fusion's
/run_code request and reply schema (the real service cannot be reached from CI): the server checks every request
field against that schema and runs the code in the local sandbox."""

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from verl.rewards import sandbox
from verl.rewards.sandbox import SandboxLimits, SandboxUnavailable, bwrap, run_many_cases, run_python


pytestmark = pytest.mark.skipif(
    bwrap.executable() is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)

# Sandbox Fusion's RunCodeRequest fields (sandbox_fusion.models) and the types this client may send in them.
REQUEST_FIELDS = {
    "code": str,
    "language": str,
    "stdin": str,
    "run_timeout": float,
    "compile_timeout": float,
    "memory_limit_MB": int,
    "files": dict,
    "fetch_files": list,
}


class _Handler(BaseHTTPRequestHandler):
    requests: list[dict] = []
    answer_error = False

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        assert self.path == "/run_code", self.path
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(request)
        unknown = set(request) - set(REQUEST_FIELDS)
        wrong = [
            key
            for key, value in request.items()
            if key in REQUEST_FIELDS and not isinstance(value, REQUEST_FIELDS[key])
        ]
        if unknown or wrong or request.get("language") != "python":
            reply = {"status": "SandboxError", "message": f"bad request: {unknown} {wrong}"}
        elif type(self).answer_error:
            reply = {"status": "SandboxError", "message": "executor pod lost"}
        else:
            limits = SandboxLimits(wall_s=request["run_timeout"], memory_mb=request["memory_limit_MB"])
            local = run_python(request["code"], request["stdin"], limits)
            state = "TimeLimitExceeded" if local.status == "timeout" else "Finished"
            reply = {
                "status": "Success" if local.status == "ok" else "Failed",
                "message": "",
                "compile_result": None,
                "run_result": {
                    "status": state,
                    "execution_time": local.wall_s,
                    "return_code": None if state == "TimeLimitExceeded" else local.returncode,
                    "stdout": local.stdout,
                    "stderr": local.stderr,
                },
                "executor_pod_name": None,
                "files": {},
            }
        body = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def service() -> Iterator[str]:
    _Handler.requests, _Handler.answer_error = [], False
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_cases_run_remotely_with_the_same_statuses(service: str) -> None:
    limits = SandboxLimits(isolation="sandbox_fusion", endpoint=service, wall_s=2.0)
    program = "a, b = map(int, input().split())\n"
    jobs = [
        (program, [("1 2\n", "\nprint(a + b)\n"), ("3 4\n", "\nassert a + b == 0\n")]),
        ("while True: pass\n", [""]),
    ]
    (summed, failed), (looped,) = run_many_cases(jobs, limits, max_workers=3)
    assert (summed.status, summed.stdout) == ("ok", "3\n")
    assert failed.status == "error" and "AssertionError" in failed.stderr
    assert looped.status == "timeout"
    assert len(_Handler.requests) == 3
    assert all(request["memory_limit_MB"] == limits.memory_mb for request in _Handler.requests)
    assert sandbox.isolation("sandbox_fusion")["filesystem"] == "sandbox-fusion service"


def test_a_case_with_a_suffix_runs_the_code_as_a_module_not_main(service: str) -> None:
    """As in the local harness: with a suffix (the tests calling the program's functions) the code is the module
    `solution`, so its `if __name__ == "__main__":` block, reading the empty stdin, does not run (it ran as __main__
    and failed with EOFError); without one it is __main__ still. `from __future__` may start the code."""
    limits = SandboxLimits(isolation="sandbox_fusion", endpoint=service, wall_s=5.0)
    program = (
        "from __future__ import annotations\n"
        "def name() -> str:\n    return __name__\n"
        "if __name__ == '__main__':\n    print(input())\n"
    )
    [results] = run_many_cases([(program, [("", "\nprint(name())\n"), ("x\n", ""), ("", "\nassert 0\n")])], limits)
    assert [(result.status, result.stdout) for result in results[:2]] == [("ok", "solution\n"), ("ok", "x\n")]
    assert results[2].status == "error" and "line 7, in <module>\n    assert 0\n" in results[2].stderr


def test_an_unreachable_or_failing_service_stops_with_the_endpoint_named(service: str) -> None:
    _Handler.answer_error = True
    with pytest.raises(SandboxUnavailable, match=r"127\.0\.0\.1.*/run_code.*executor pod lost"):
        run_python("print(1)", limits=SandboxLimits(isolation="sandbox_fusion", endpoint=service))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(SandboxUnavailable, match="did not run a program after 3 tries"):
        run_python("print(1)", limits=SandboxLimits(isolation="sandbox_fusion", endpoint=closed))


def test_the_endpoint_goes_with_the_remote_mode_only() -> None:
    with pytest.raises(ValueError, match="SandboxLimits.endpoint must be the http"):
        SandboxLimits(isolation="sandbox_fusion")
    with pytest.raises(ValueError, match="SandboxLimits.endpoint must be the http"):
        SandboxLimits(endpoint="http://sandbox:8080")
    with pytest.raises(ValueError, match="SandboxLimits.endpoint must be the http"):
        SandboxLimits(isolation="sandbox_fusion", endpoint="sandbox:8080")
