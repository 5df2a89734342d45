# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""verl.envs without an engine, the edges: calls a model writes that the reader must refuse or complete, how a
ToolEnv counts and words its tool messages, XMLParser's field names and scores, and the loader's errors for a spec or
a file that cannot be used."""

import json
import threading

import pytest

from tests.envs.test_envs import add, explode
from verl.envs import ToolEnv, XMLParser, load_environment, parse_tool_calls
from verl.envs.loader import EnvironmentLoadError
from verl.envs.tools import HERMES, MAX_RESULT_CHARS, ToolCallFormat, assistant_message, tool_call_format
from verl.models.tiny_models import CHAT_TEMPLATE, TOOL_CALLS, build_tokenizer


def now() -> str:
    """The time (a tool without arguments)."""
    return "noon"


def echo(text: str) -> str:
    """Say it back.

    Args:
        text: what to say
    """
    return text


def leave(code: int) -> str:
    """Calls sys.exit.

    Args:
        code: the exit code
    """
    raise SystemExit(code)


def _call(name: str, arguments: str = "{}") -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'


def test_a_call_that_opens_a_turn_inside_the_generation_prompts_thinking_block_is_not_made():
    """A generation prompt that opened the reasoning block (R1 distills, Qwen3.5 thinking): a call drafted at the very
    start of the turn, before `</think>`, is reasoning too."""
    draft, call = _call("add", '{"a": 1, "b": 1}'), _call("add", '{"a": 2, "b": 3}')
    assert parse_tool_calls(f"{draft}\n</think>\n\nThe sum is 2.") == []
    assert parse_tool_calls(f"{draft}</think>{call}") == [{"name": "add", "arguments": {"a": 2, "b": 3}}]


def test_a_call_without_a_text_name_is_an_error_and_one_without_arguments_has_none():
    bad = 'a tool call must be a JSON object with a "name" and "arguments"'
    for body in ('{"name": 5, "arguments": {}}', '{"arguments": {"a": 1}}', '{"name": null}'):
        assert parse_tool_calls(f"<tool_call>{body}</tool_call>") == [bad]
    env = ToolEnv(tools=[add, now])
    step = env.step(env.reset({}), '<tool_call>{"name": 5, "arguments": {}}</tool_call>')
    assert step.messages == [{"role": "tool", "content": f"Error: {bad}."}]
    assert (step.tool_calls, step.tool_errors) == (1, 1)
    assert parse_tool_calls('<tool_call>{"name": "now"}</tool_call>') == [{"name": "now", "arguments": {}}]
    step = env.step(env.reset({}), '<tool_call>{"name": "now"}</tool_call>')
    assert (step.tool_calls, step.tool_errors, step.messages) == (1, 0, [{"role": "tool", "content": "noon"}])


def test_a_result_longer_than_the_limit_is_cut_with_a_note_and_one_at_the_limit_is_not():
    env = ToolEnv(tools=[echo])
    exact = "x" * MAX_RESULT_CHARS
    assert env.call("echo", {"text": exact}) == (exact, False)
    assert env.call("echo", {"text": exact + "y"}) == (exact + "\n[... 1 more characters cut]", False)
    assert env.call("echo", {"text": exact + "yz"}) == (exact + "\n[... 2 more characters cut]", False)


def test_an_unknown_tool_is_named_shortly_and_the_tools_are_listed():
    env = ToolEnv(tools=[explode, add])
    step = env.step(env.reset({}), _call("m" * 150))
    expected = f"Error: there is no tool named {'m' * 100!r}; the tools are ['add', 'explode']."
    assert step.messages == [{"role": "tool", "content": expected}] and step.tool_errors == 1


def test_a_tool_that_exits_or_answers_an_error_is_a_failed_call():
    """A tool that calls sys.exit (SystemExit, not an Exception) lost its thread's outcome; a result that starts with
    "Error" (as python_tool's failures) is a failed call as well."""
    env = ToolEnv(tools=[leave, echo])
    step = env.step(env.reset({}), _call("leave", '{"code": 3}') + _call("echo", '{"text": "Error: no such file"}'))
    assert [message["content"] for message in step.messages] == [
        "Error: leave raised SystemExit: 3",
        "Error: no such file",
    ]
    assert (step.tool_calls, step.tool_errors, step.done) == (2, 2, False)
    assert env.call("echo", {"text": "fine"}) == ("fine", False)


def test_a_turn_of_exactly_the_most_calls_makes_them_all_without_a_note():
    env = ToolEnv(tools=[add])
    env.max_calls_per_turn = 3
    step = env.step(env.reset({}), _call("add", '{"a": 1, "b": 1}') * 3)
    assert [message["content"] for message in step.messages] == ["2"] * 3
    assert (step.tool_calls, step.tool_errors) == (3, 0)


def test_a_call_refused_while_timed_out_calls_run_is_a_failed_call():
    release = threading.Event()

    def stuck() -> str:
        """Wait."""
        release.wait(60)
        return "done"

    env = ToolEnv(tools=[stuck, add], tool_timeout_s=0.05)
    env.max_running_timed_out = 1
    try:
        step = env.step(env.reset({}), _call("stuck") + _call("add", '{"a": 1, "b": 2}'))
    finally:
        release.set()
    assert step.messages[1]["content"] == "Error: 1 earlier tool calls that timed out are still running."
    assert (step.tool_calls, step.tool_errors) == (2, 2)
    for thread in threading.enumerate():
        if thread.name == "tool-stuck":
            thread.join(10)


def test_tools_given_replace_the_classes_even_when_none():
    class Calculator(ToolEnv):
        tools = (add,)

    assert Calculator().tools == (add,)
    assert Calculator(tools=[now]).tools == (now,)
    assert Calculator(tools=[]).tools == ()


def test_a_servers_reply_gives_each_call_its_own_id_and_its_arguments():
    text = _call("echo", '{"text": "grüße"}') + _call("echo", '{"text": "日本"}')
    message = assistant_message(text, HERMES)
    ids = [call["id"] for call in message["tool_calls"]]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)
    assert [json.loads(call["function"]["arguments"]) for call in message["tool_calls"]] == [
        {"text": "grüße"},
        {"text": "日本"},
    ]


def test_a_format_for_a_requests_tools_types_the_arguments_by_their_schemas_and_keeps_the_reasoning():
    """vLLM's parsers type a call's arguments by the request's tool schemas (Qwen3.5's XML writes them as text); the
    content a reply keeps is the reasoning block and the text around the calls."""
    schemas = ToolEnv(tools=[add]).tool_schemas()
    tokenizer = build_tokenizer(kind="qwen3")
    calls = ToolCallFormat("qwen3_coder", tokenizer, None, "<tool_call>").for_tools(schemas)
    xml = "<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n</parameter>\n"
    xml += "</function>\n</tool_call>"
    text = f"<think>plan</think>I add. {xml}"
    assert calls.read(text) == ("<think>plan</think>I add.", [{"name": "add", "arguments": {"a": 2, "b": 3}}])
    message = assistant_message(text, calls)
    assert message["content"] == "<think>plan</think>I add."
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"a": 2, "b": 3}
    assert HERMES.for_tools(schemas) is HERMES


XML_CALLS = {
    "qwen3_coder": "<tool_call>\n<function=echo>\n<parameter=text>\n{}\n</parameter>\n</function>\n</tool_call>",
    "glm45": "<tool_call>echo\n<arg_key>text</arg_key>\n<arg_value>{}</arg_value>\n</tool_call>",
}
"""A call of `echo` (its text to fill in) as Qwen3.5's and GLM-4.5's templates write one."""


def _xml_envs():
    """(a ToolEnv of `echo` reading calls in the format, the call as written) for Qwen3.5's and GLM-4.5's formats."""
    from tests.envs.test_envs import GLM45_CALLS, QWEN35_CALLS, _with_calls

    for calls, parser in [(QWEN35_CALLS, "qwen3_coder"), (GLM45_CALLS, "glm45")]:
        tokenizer = build_tokenizer(kind="qwen3")
        tokenizer.chat_template = _with_calls(calls)
        env = ToolEnv(tools=[echo])
        env.tool_format = tool_call_format(tokenizer, env.tool_schemas())
        assert env.tool_format.parser == parser
        yield env, XML_CALLS[parser]


def test_a_think_tag_inside_an_xml_formats_call_is_the_calls_text():
    """Qwen3.5's and GLM-4.5's formats, read by vLLM's parsers: a "</think>" or "<think>" inside a call's argument
    (code that prints it) is the call's text, as in a Hermes block; it was taken for the end (or start) of reasoning,
    the call with it, so the call was not made and the episode ended as if the model had answered. A bare opening
    the reasoning mentions does not hide its end either."""
    for env, written in _xml_envs():
        state = env.reset({})
        for text in ("print('</think>')", "a <think> b", "<think>x</think>"):
            for before in ("", "<think>plan</think>", "plan</think>"):
                step = env.step(state, before + written.format(text))
                assert (step.done, step.tool_errors, step.messages) == (False, 0, [{"role": "tool", "content": text}])
        step = env.step(state, f"<think>I write <tool_call> then</think>{written.format('two')}")
        assert (step.tool_errors, step.messages) == (0, [{"role": "tool", "content": "two"}])


def test_a_call_cut_by_the_turns_token_limit_in_an_xml_format_is_malformed_not_made():
    """Qwen3.5's and GLM-4.5's formats: a final call without its `</tool_call>` (max_tokens_per_turn cut the turn
    inside it) is reported as malformed, as a cut Hermes call is; vLLM's parsers read the arguments written so far,
    so the tool ran with a cut argument list (one left out, or its default) as if the model had called it so."""
    for env, written in _xml_envs():
        state = env.reset({})
        cut = written.format("rm -rf /tmp/x").split("</tool_call>")[0]
        for ending in (cut, cut[: cut.index("rm")]):
            step = env.step(state, f"{written.format('one')}\n{ending}")
            assert (step.done, step.tool_calls, step.tool_errors) == (False, 2, 1)
            assert step.messages[0] == {"role": "tool", "content": "one"}
            assert step.messages[1]["content"] == (
                "Error: the tool call after <tool_call> has no </tool_call> (the turn ended inside it)."
            )
            message = assistant_message(f"{written.format('one')}\n{ending}", env.tool_format)
            assert len(message["tool_calls"]) == 1 and message["content"].endswith(ending)
        assert env.step(state, f"<think>{cut}</think>Done.").done  # a cut draft in the reasoning is no call
        assert (env.tool_format.marker, env.tool_format.closing) == ("<tool_call>", "</tool_call>")


def _llama_with_calls(calls: str) -> "object":
    """The tiny Llama 3 tokenizer (with Llama 3.1's <|python_tag|>, which vLLM's Llama parser needs) whose template
    writes an assistant's `tool_calls` by `calls` (Jinja over `message.tool_calls`) and tool messages as `ipython`."""
    tokenizer = build_tokenizer(kind="llama")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|python_tag|>"]})
    header = "<|start_header_id|>{}<|end_header_id|>\n\n"
    tokenizer.chat_template = (
        "{{ bos_token }}{% for message in messages %}{% if message.role == 'assistant' and message.tool_calls %}"
        + header.format("assistant") + calls + "<|eot_id|>{% elif message.role == 'tool' %}" + header.format("ipython")
        + "{{ message.content }}<|eot_id|>{% else %}" + header.format("{{ message.role }}")
        + "{{ message.content | trim }}<|eot_id|>{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}" + header.format("assistant") + "{% endif %}"
    )  # fmt: skip
    return tokenizer


def test_pythonic_calls_after_a_role_header_are_read_in_training_and_serving():
    """Llama 3.2's and Llama 4's templates write calls as a Python list, `[add(a=2, b=3), ...]`, right after the
    assistant header, whose role name is text between special tokens: the probe of the format read the header too
    ("assistant\n\n[...]", and a server's the end-of-turn token after it), which vLLM's pythonic parser does not
    read, so training and serving refused these models."""
    env = ToolEnv(tools=[add])
    pythonic = (
        "[{% for call in message.tool_calls %}{{ call.function.name }}({% for key, value in call.function.arguments "
        "| items %}{{ key }}={{ value | tojson }}{% if not loop.last %}, {% endif %}{% endfor %})"
        "{% if not loop.last %}, {% endif %}{% endfor %}]"
    )
    tokenizer = _llama_with_calls(pythonic)
    for episodes in (True, False):
        assert tool_call_format(tokenizer, env.tool_schemas(), episodes=episodes).parser == "pythonic"
    env.tool_format = tool_call_format(tokenizer, env.tool_schemas())
    step = env.step(env.reset({}), "[add(a=2, b=3), add(a=1, b=1)]")
    assert (step.tool_calls, step.tool_errors, [m["content"] for m in step.messages]) == (2, 0, ["5", "2"])


def test_arguments_written_as_a_json_string_are_an_object_in_vllms_formats_too():
    """A model may write a call's arguments as a JSON string (read as the object it holds in a Hermes block); vLLM's
    parsers (Llama 3.1's JSON calls here) pass on JSON of that string, which was refused as not an object."""
    env = ToolEnv(tools=[add])
    json_calls = (
        '{% set call = message.tool_calls[0].function %}{"name": "{{ call.name }}", "parameters": '
        "{{ call.arguments | tojson }}}"
    )
    env.tool_format = tool_call_format(_llama_with_calls(json_calls), env.tool_schemas())
    assert env.tool_format.parser == "llama3_json"
    for written in ('{"a": 2, "b": 3}', '"{\\"a\\": 2, \\"b\\": 3}"'):
        step = env.step(env.reset({}), f'{{"name": "add", "parameters": {written}}}')
        assert (step.tool_calls, step.tool_errors, step.messages) == (1, 0, [{"role": "tool", "content": "5"}])


def test_a_final_answer_with_braces_logs_no_parser_traceback_in_a_json_call_format():
    """Llama 3.1's JSON calls: vLLM's parser logged an exception's traceback for every turn with a brace that is no
    call (`\\boxed{5}`, code), twice per final answer (the step, then the turn's record), filling a run's log. The
    answer is still no call, and the parser's log outside our reads is left as it is."""
    import logging

    env = ToolEnv(tools=[add])
    calls = (
        '{% set call = message.tool_calls[0].function %}{"name": "{{ call.name }}", "parameters": '
        "{{ call.arguments | tojson }}}"
    )
    env.tool_format = tool_call_format(_llama_with_calls(calls), env.tool_schemas())
    parser_logger = logging.getLogger(type(env.tool_format._vllm).__module__)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    parser_logger.addHandler(handler)
    try:
        answer = "The sum is \\boxed{5} and {not json"
        step = env.step(env.reset({}), answer)
        assert step.done and step.tool_calls == 0
        assert assistant_message(answer, env.tool_format)["content"] == answer
        assert records == []
        parser_logger.error("a line of the parser's own")  # elsewhere (vLLM's server) it logs as it did
        assert [record.getMessage() for record in records] == ["a line of the parser's own"]
    finally:
        parser_logger.removeHandler(handler)


def test_a_server_reads_calls_whose_tags_are_special_tokens_which_a_model_turn_loses():
    """A server reads the reply with its special tokens (as vLLM does); an episode's model turn is decoded without
    them, so calls whose tags are special tokens cannot be read there, which is refused naming why."""
    calls = '<tool_call>\n{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}\n'
    calls += "</tool_call>"
    tokenizer = build_tokenizer(kind="qwen3")
    tokenizer.chat_template = CHAT_TEMPLATE.replace(
        TOOL_CALLS, f"{{% for call in message.tool_calls or [] %}}{calls}{{% endfor %}}"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<tool_call>", "</tool_call>"]})
    schemas = ToolEnv(tools=[add]).tool_schemas()
    assert tool_call_format(tokenizer, schemas, episodes=False) is HERMES
    with pytest.raises(NotImplementedError, match="decoded without special tokens, as a model turn is"):
        tool_call_format(tokenizer, schemas)


def test_a_stream_sends_the_content_before_a_hermes_call_as_it_comes():
    """Hermes calls open with `<tool_call>`: a server streams the text before it at once (other formats hold it)."""
    from types import SimpleNamespace

    from verl.serve.chat import ChoiceText

    assert HERMES.opening == "<tool_call>"
    choice = ChoiceText(HERMES)
    pieces = [
        choice.add(SimpleNamespace(text=text, token_ids=[0], finish_reason=None, stop_reason=None))
        for text in ("Let me ", "add. ", '<tool_call>{"name": "add", ')
    ]
    assert pieces == ["Let me ", "add. ", ""]


def test_xml_parser_field_names_and_fields_that_repeat_or_span_lines():
    for fields in ((), ("1st",), ("an swer",)):
        with pytest.raises(ValueError, match="tag names"):
            XMLParser(fields)
    parser = XMLParser(("think", "answer"))
    assert parser.parse("<think>\nstep 1\nstep 2\n</think>\n<answer>\n4\n</answer>") == {
        "think": "step 1\nstep 2",
        "answer": "4",
    }
    assert parser.format_score("<think>\na\n</think>\n<answer>\nb\n</answer>\n") == 1.0
    # a field written twice does not appear exactly once: only the other counts
    assert parser.format_score("<think>a</think><think>b</think><answer>c</answer>") == 0.25


ECHO_ENV = (
    "from verl.envs import MultiTurnEnv\n"
    "class Echo(MultiTurnEnv):\n"
    "    def __init__(self, rounds=1):\n"
    "        if rounds < 0:\n"
    "            raise SystemExit('no rounds')\n"
    "        self.rounds = rounds\n"
    "    def env_response(self, state, response):\n"
    "        return [{'role': 'user', 'content': 'again'}], False\n"
)


def test_loading_refuses_a_spec_that_is_not_a_python_file_and_a_class():
    for spec in ("env.txt:Echo", "env.py:", "env.py"):
        with pytest.raises(EnvironmentLoadError, match=r"must be 'path/to/env.py:ClassName'"):
            load_environment(spec)


def test_loading_a_file_in_a_folder_whose_name_has_a_colon(tmp_path):
    folder = tmp_path / "run:1"
    folder.mkdir()
    (folder / "env.py").write_text(ECHO_ENV)
    assert load_environment(f"{folder / 'env.py'}:Echo", {"rounds": 2}).rounds == 2


def test_loading_names_an_import_that_fails_or_exits_and_a_constructor_that_exits(tmp_path, monkeypatch):
    (tmp_path / "broken.py").write_text("def oops(:\n")
    with pytest.raises(EnvironmentLoadError, match=r"broken.py:Echo'.*importing .*broken.py failed with SyntaxError"):
        load_environment(f"{tmp_path / 'broken.py'}:Echo")
    (tmp_path / "exits.py").write_text("import sys\nsys.exit('not now')\n")
    with pytest.raises(EnvironmentLoadError, match=r"importing .*exits.py failed with SystemExit: not now"):
        load_environment(f"{tmp_path / 'exits.py'}:Echo")
    (tmp_path / "env.py").write_text(ECHO_ENV)
    with pytest.raises(EnvironmentLoadError, match=r"Echo\(\*\*worker.rollout.env_kwargs=\{'rounds': -1\}\) failed"):
        load_environment(f"{tmp_path / 'env.py'}:Echo", {"rounds": -1})
    # a file that needs verifiers where it is not installed is told how to install it
    (tmp_path / "needs_vf.py").write_text("import verifiers\n")
    monkeypatch.setitem(__import__("sys").modules, "verifiers", None)
    with pytest.raises(EnvironmentLoadError, match=r"ModuleNotFoundError.*Install verifiers with `pip install"):
        load_environment(f"{tmp_path / 'needs_vf.py'}:Echo")


def test_an_infinite_tool_timeout_waits_for_the_tool():
    """ToolEnv(tool_timeout_s=inf) passed its check, then every call raised OverflowError from the thread's join."""

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    env = ToolEnv(tools=[add], tool_timeout_s=float("inf"))
    state = env.reset({"prompt": "2 + 3?"})
    step = env.step(state, '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')
    assert not step.done and step.tool_errors == 0 and step.messages[0]["content"] == "5"


def test_a_think_marker_inside_a_call_is_the_call_s_text():
    """Code that prints "</think>" made everything before it reasoning, the call too: the episode ended as if the
    model had answered. A call inside the reasoning is still not made."""
    code = {"name": "python", "arguments": {"code": "print(s.split('</think>')[1])"}}
    assert parse_tool_calls(f"<tool_call>{json.dumps(code)}</tool_call>") == [code]
    opened = {"name": "echo", "arguments": {"text": "<think>"}}
    after = {"name": "add", "arguments": {}}
    text = f"<tool_call>{json.dumps(opened)}</tool_call><tool_call>{json.dumps(after)}</tool_call>"
    assert parse_tool_calls(text) == [opened, after]
    reasoned = f'<tool_call>{{"name": "no", "arguments": {{}}}}</tool_call> hm</think><tool_call>{json.dumps(after)}</tool_call>'
    assert parse_tool_calls(reasoned) == [after]  # an unopened block (the prompt opened it) up to its end


def test_a_bare_tool_call_opening_in_the_reasoning_leaves_the_call_after_it():
    """A reasoning block that mentions `<tool_call>` without closing it made one block from there to the end of the
    real call after `</think>`; that block started in the reasoning and was dropped, the real call with it, and the
    episode ended as if the model had answered."""
    call = {"name": "add", "arguments": {"a": 2, "b": 3}}
    for after in (f"<tool_call>{json.dumps(call)}</tool_call>", f"\n<tool_call>{json.dumps(call)}"):
        text = f"<think>I write <tool_call> and its JSON, then </tool_call>? No: once.</think>{after}"
        assert parse_tool_calls(text) == [call], text
        assert parse_tool_calls(f"<think>A <tool_call> opening.</think>{after}") == [call]
        assert parse_tool_calls(f"I plan a <tool_call> here.</think>{after}") == [call]  # the prompt opened it
    step = ToolEnv(tools=[add]).step(
        {}, f"<think>Maybe <tool_call> add.</think><tool_call>{json.dumps(call)}</tool_call>"
    )
    assert not step.done and step.messages == [{"role": "tool", "content": "5"}]
    assert parse_tool_calls("<think>A <tool_call> draft.</think>Done.") == []
