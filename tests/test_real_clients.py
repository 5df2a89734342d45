# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`python -m verl.serve` under clients nobody here wrote: the OpenAI Agents SDK's `output_type=` (on chat
completions, and on its default Responses model with a forced tool call first) and LangChain's
`with_structured_output()` get a typed answer from the tiny model (the server holds the reply to the schema).

The clients need openai 3.x, past the verifiers extra's pin, so they live in a venv of their own (built once under
outputs/client-venv from the package index; the test is skipped, saying why, where the index cannot be reached).
"""

import json
import os
import subprocess
import sys

import pytest

from tests.test_serve import server, tiny_model  # noqa: F401 - the served tiny model


pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(REPO, "outputs", "client-venv")
CLIENTS = ("openai-agents==0.24.0", "langchain-openai==1.7.4")

CLIENT_SCRIPT = r"""
import json
import sys

from pydantic import BaseModel


class Answer(BaseModel):
    ok: bool


url, bias = sys.argv[1], json.loads(sys.argv[2])
out = {}

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)
model = OpenAIChatCompletionsModel(model="tiny", openai_client=AsyncOpenAI(base_url=url, api_key="unused"))
settings = ModelSettings(temperature=0.0, max_tokens=40, extra_body={"logit_bias": bias})
agent = Agent(name="judge", instructions="Answer.", model=model, output_type=Answer, model_settings=settings)
out["agents"] = Runner.run_sync(agent, "Is 2 + 2 four?").final_output.model_dump()

from agents import OpenAIResponsesModel, function_tool

calls = []


@function_tool
def check(correct: bool) -> str:
    'Record whether the sum is correct.'  # (a bool: a random model's integer runs on past max_tokens)
    calls.append(correct)
    return "noted"


# The SDK's default model (the Responses API), typed output with a forced tool: the call, then the typed answer
model = OpenAIResponsesModel(model="tiny", openai_client=AsyncOpenAI(base_url=url, api_key="unused"))
forced = ModelSettings(temperature=0.0, max_tokens=120, tool_choice="required", extra_body={"logit_bias": bias})
agent = Agent(name="adder", instructions="Add.", model=model, output_type=Answer, tools=[check], model_settings=forced)
out["agents_responses"] = Runner.run_sync(agent, "Is 1 + 2 three?").final_output.model_dump()
out["tool_calls"] = len(calls)

from langchain_openai import ChatOpenAI

chat = ChatOpenAI(model="tiny", base_url=url, api_key="unused", temperature=0.0, max_tokens=40, logit_bias=bias)
out["langchain"] = chat.with_structured_output(Answer, method="json_schema").invoke("Is 2 + 2 four?").model_dump()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def client_python():
    """The client venv's Python, built once (pip from the package index)."""
    python = os.path.join(VENV, "bin", "python")
    check = [python, "-c", "import agents, langchain_openai"]
    if os.path.exists(python) and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    steps = [[sys.executable, "-m", "venv", VENV], [python, "-m", "pip", "install", "-q", *CLIENTS]]
    for command in steps:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.skip(f"could not build the client venv ({' '.join(command[-3:])}): {done.stderr[-500:]}")
    return python


def test_the_agents_sdk_and_langchain_get_typed_answers(server, tiny_model, client_python, tmp_path):  # noqa: F811
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    # JSON allows any whitespace, which a random model writes on and on: banned, so the object ends within 40 tokens
    bias = {str(token): -100 for token in range(len(tokenizer)) if not tokenizer.decode([token]).strip()}
    script = tmp_path / "clients.py"
    script.write_text(CLIENT_SCRIPT)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [client_python, str(script), server, json.dumps(bias)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert answers.pop("tool_calls") >= 1  # the forced tool ran before the typed answer
    assert set(answers) == {"agents", "agents_responses", "langchain"}
    for name, answer in answers.items():
        assert set(answer) == {"ok"} and isinstance(answer["ok"], bool), (name, answer)
