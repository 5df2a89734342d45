# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A `verifiers` (0.4) taskset with a tool: add two numbers with the `calc_add` tool, answer in <answer></answer>.

verifiers serves the tool (an MCP server: `python -m verifiers_sum`), its harness calls it and its rewards score the
episode; verl.envs.verifiers_env runs that in training and evaluation (README.md, "Multi-turn and tool-use rollouts").

    python -m verl.envs.verifiers_env export --env examples/envs/verifiers_sum.py:SumTaskset --output sum.jsonl
    python -m verl.trainer.main ... data.train_files=sum.jsonl \\
        worker.rollout.env=examples/envs/verifiers_sum.py:SumTaskset worker.rollout.max_turns=3 \\
        worker.reward.reward_function=verl/envs/verifiers_env.py:rubric_reward
"""

import re

import verifiers.v1 as vf


PAIRS = ((20, 3), (4, 40), (17, 25), (8, 9), (31, 12), (6, 60), (13, 13), (2, 98))


class SumData(vf.TaskData):
    answer: str


class Calculator(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "calc"  # the model sees `calc_add`

    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)


class SumTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class SumTask(vf.Task[SumData, vf.State, SumTaskConfig]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        found = re.search(r"<answer>(.*?)</answer>", trace.last_reply or "", re.S)
        return float(found is not None and found.group(1).strip() == self.data.answer)

    @vf.reward(weight=0.5)
    async def used_tool(self, trace: vf.Trace) -> float:
        return float(any(message.content == self.data.answer for message in trace.tool_messages))

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply or ""))


class SumConfig(vf.TasksetConfig):
    task: SumTaskConfig = SumTaskConfig()


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    @classmethod
    def toolsets(cls, config: SumConfig) -> list[vf.Toolset]:
        """The calculator keeps no state between calls: one server shared by the episodes of a rollout (a tool with
        per-episode state would go in `SumTask.toolsets`, one server per episode)."""
        return [Calculator(config.task.tools)]

    def load(self) -> list[SumTask]:
        return [
            SumTask(SumData(prompt=f"Add {a} and {b} with the tool.", answer=str(a + b)), self.config.task)
            for a, b in PAIRS
        ]


__all__ = ["SumTaskset"]


if __name__ == "__main__":  # the tool server verifiers starts for the episodes
    Calculator.run()
