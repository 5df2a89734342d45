# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""tests/gpu: every test here is marked `gpu` and skipped, with the reason in the summary, where CUDA is absent.

Run them on a CUDA machine with `pytest tests/gpu -rs`; `-m "not gpu"` leaves them out anywhere.

A failure's traceback is written as soon as the test fails, not only in pytest's end-of-run summary: GPU sessions
run under a hard deadline, and a run stopped at it must still show why the tests before it failed.

vLLM's sleep mode allows one engine per process at a time ("CuMem allocator can only be used for one instance per
process"): after each test its engine is let go (the failed test's traceback, which pytest keeps for post-mortem
debugging, held it) and collected, so the next test can start its own.
"""

import gc
import sys

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA device: torch.cuda.is_available() is False on this machine")
    for item in items:
        if "tests/gpu/" not in str(item.fspath).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.gpu)
        if not torch.cuda.is_available():
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    """Write a failed test's traceback (and the end of its stderr) to the terminal at once."""
    report = yield
    reporter = item.config.pluginmanager.getplugin("terminalreporter")
    if report.failed and reporter is not None:
        reporter.write_line("")
        reporter.write_sep("!", f"FAILED {report.nodeid} ({report.when}), written as it happened")
        reporter.write_line(report.longreprtext)
        captured = report.capstderr.strip()
        if captured:
            reporter.write_sep("-", "its captured stderr, last 60 lines")
            reporter.write_line("\n".join(captured.splitlines()[-60:]))
        reporter.write(f"{'!' * 20} end of {report.nodeid}\n", flush=True)
    return report


@pytest.fixture(autouse=True)
def _release_engines(request: pytest.FixtureRequest):
    """After each test: drop the references a failure's traceback keeps and collect, so its engine's memory is freed
    before the next test builds one."""
    yield
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()
    if not torch.cuda.is_available():
        return
    torch.cuda.empty_cache()
    allocator = getattr(sys.modules.get("vllm.device_allocator.cumem"), "CuMemAllocator", None)
    if allocator is not None and allocator.instance is not None and allocator.instance.get_current_usage() > 0:
        reporter = request.config.pluginmanager.getplugin("terminalreporter")  # shown even for a passed test
        if reporter is not None:
            reporter.write_line(
                f"tests/gpu: {allocator.instance.get_current_usage() / 2**30:.2f} GiB of {request.node.nodeid}'s vLLM "
                "engine are still held after collection; the next test that builds an engine will fail to start"
            )
