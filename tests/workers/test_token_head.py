# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The actor's compiled token head (log-probs and entropy from logits), as it is built on CUDA.

On CUDA `token_head` compiles the head; torch.compile turns a Python float argument into a float64 CPU tensor input,
which an update's graph saves for its backward, so Inductor needed a CPU kernel in every GPU update (its host
toolchain probe stalled the first update, or hung it: docs/gpu.md). Here the CUDA branch is built on
the CPU with a backend that records the graphs, to check what reaches them, and the results and gradients are
compared with the eager head's.
"""

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from verl.workers.actor import dp_actor


def _recording_backend(graphs: list[list[torch.Tensor]]):
    def compiler(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append([value for value in example_inputs if isinstance(value, torch.Tensor)])
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler)


def test_compiled_head_gets_the_temperature_as_a_float32_tensor_beside_the_logits(monkeypatch) -> None:
    torch._dynamo.reset()
    graphs: list[list[torch.Tensor]] = []
    compile_ = torch.compile
    monkeypatch.setattr(dp_actor.device_utils, "get_device_type", lambda: "cuda")
    monkeypatch.setattr(
        torch, "compile", lambda fn, **kwargs: compile_(fn, backend=_recording_backend(graphs), **kwargs)
    )
    compiled = dp_actor.token_head(True)
    eager = dp_actor.token_head(False)
    assert compiled is not eager and graphs == []
    generator = torch.Generator().manual_seed(0)
    for rows, temperature in ((19, 0.7), (23, 0.7), (11, 1.0)):  # new row counts and temperatures: no recompile
        logits = torch.randn(rows, 64, generator=generator)
        labels = torch.randint(0, 64, (rows,), generator=generator)
        got_logits, want_logits = logits.clone().requires_grad_(), logits.clone().requires_grad_()
        got = compiled(got_logits, labels, temperature, True)
        want = eager(want_logits, labels, temperature, True)
        for name in ("log_probs", "entropy"):
            torch.testing.assert_close(got[name], want[name], rtol=1e-6, atol=1e-6)
        (got["log_probs"].sum() + 0.5 * got["entropy"].sum()).backward()
        (want["log_probs"].sum() + 0.5 * want["entropy"].sum()).backward()
        torch.testing.assert_close(got_logits.grad, want_logits.grad, rtol=1e-6, atol=1e-6)
    assert len(graphs) == 2, len(graphs)  # one forward and one backward graph, for every shape and temperature
    forward_inputs = graphs[0]
    scalars = [value for value in forward_inputs if value.dim() == 0]
    assert [value.dtype for value in scalars] == [torch.float32], [(v.dtype, v.shape) for v in forward_inputs]
    assert all(value.dtype != torch.float64 for graph in graphs for value in graph)
    torch._dynamo.reset()
