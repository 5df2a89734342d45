# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The example prompt templates and reward functions, on hand-written right and wrong responses."""

import json
import os
import re
import warnings

import jinja2
import pytest

from verl.rewards.function import load_reward_function


ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def example(name: str, **kwargs):
    return load_reward_function(os.path.join(ROOT, "examples", "reward_function", f"{name}.py:compute_score"), kwargs)


def sample(response: str, ground_truth: str, response_length: int = 10) -> dict:
    return {"response": response, "ground_truth": ground_truth, "response_length": response_length}


@pytest.mark.parametrize("name, instruction", [("math", "\\boxed{}"), ("r1v", "<answer>"), ("dapo", "Answer:")])
def test_templates_render_the_content(name: str, instruction: str) -> None:
    with open(os.path.join(ROOT, "examples", "format_prompt", f"{name}.jinja"), encoding="utf-8") as f:
        template = jinja2.Template(f.read())
    text = template.render(content="  What is 2 + 2?\n", answer="4", images=[])
    assert "What is 2 + 2?" in text and "  What" not in text and "?\n\n\n" not in text  # content is trimmed
    assert instruction in text


@pytest.mark.parametrize(
    "response, ground_truth, accuracy, fmt",
    [
        ("<think>2 + 2 = 4</think> So the answer is \\boxed{4}.", "4", 1.0, 1.0),
        ("<think>Half of one.</think> \\boxed{\\frac{1}{2}}", "0.5", 1.0, 1.0),  # graded mathematically
        ("<think>Simplify.</think> \\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0, 1.0),
        ("< think >Spaces in tags.</ think > \\boxed{4}", "4", 1.0, 1.0),
        ("The answer is \\boxed{4}.", "4", 1.0, 0.0),  # right, but no reasoning block
        ("<think>2 + 2 = 5</think> \\boxed{5}", "4", 0.0, 1.0),
        ("<think>2 + 2 = 4</think> The answer is 4.", "4", 0.0, 0.0),  # nothing boxed
        ("<think>First \\boxed{3}, no wait</think> \\boxed{4}", "4", 1.0, 1.0),  # the last box counts
        ("<think>a</think><think>b</think> \\boxed{4}", "4", 1.0, 0.0),
        ("<think>Unclosed \\boxed{4", "4", 0.0, 0.0),
        ("<think>t</think> \\boxed{4}", ["3", "4"], 1.0, 1.0),  # a list of acceptable answers: any counts
        ("<think>t</think> \\boxed{4}", '["four", "4"]', 1.0, 1.0),  # or its JSON text
        ("<think>t</think> \\boxed{5}", ["3", "4"], 0.0, 1.0),
        ("<think>t</think> \\boxed {4}", "4", 1.0, 1.0),  # mathruler's extraction read neither of these
        ("<think>t</think> \\boxed{4} and then \\boxed{", "4", 1.0, 1.0),
    ],
)
def test_math(response: str, ground_truth: str, accuracy: float, fmt: float) -> None:
    score = example("math")(sample(response, ground_truth))
    assert score == pytest.approx({"overall": 0.9 * accuracy + 0.1 * fmt, "format": fmt, "accuracy": accuracy})


@pytest.mark.parametrize(
    "response, ground_truth, accuracy, fmt",
    [
        ("<think>The left shape has three sides.</think> <answer>triangle</answer>", "triangle", 1.0, 1.0),
        ("<think>Option B fits.</think>\n<answer> B </answer>", "B", 1.0, 1.0),
        ("<think>Count them.</think><answer>\\boxed{12}</answer>", "12", 1.0, 1.0),
        ("<think>Count them.</think><answer>12.0</answer>", "12", 1.0, 1.0),
        ("<think>Option C.</think> <answer>C</answer>", "B", 0.0, 1.0),
        ("<answer>B</answer>", "B", 1.0, 0.0),  # right, but no reasoning block
        ("<think>B</think> <answer>B</answer> and more text", "B", 1.0, 0.0),
        ("<think>B</think> B", "B", 0.0, 0.0),  # no answer tag
        ("<think>x</think> <answer></answer>", "B", 0.0, 1.0),
        ("<think>x</think> <answer>three</answer>", ["3", "three"], 1.0, 1.0),  # acceptable answers
    ],
)
def test_r1v(response: str, ground_truth: str, accuracy: float, fmt: float) -> None:
    score = example("r1v")(sample(response, ground_truth))
    assert score == pytest.approx({"overall": 0.5 * accuracy + 0.5 * fmt, "format": fmt, "accuracy": accuracy})


R1_PROMPT = "<｜User｜>What is 2 + 2?<｜Assistant｜><think>\n"  # a DeepSeek-R1 distill's generation prompt
QWEN3_OFF = "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.mark.parametrize(
    "name, prompt, response, fmt",
    [
        ("math", R1_PROMPT, "2 + 2 = 4\n</think>\nSo \\boxed{4}.", 1.0),  # the prompt opened the block
        ("math", R1_PROMPT, "<think>again</think> \\boxed{4}", 0.0),  # a second opening
        ("math", QWEN3_OFF, "2 + 2 = 4\n</think> \\boxed{4}", 0.0),  # the prompt's block is closed
        ("math", "What is 2 + 2?", "2 + 2 = 4</think> \\boxed{4}", 0.0),  # a prompt without a template
        ("r1v", R1_PROMPT, "Four.</think> <answer>4</answer>", 1.0),
        ("r1v", QWEN3_OFF, "<think>Four.</think> <answer>4</answer>", 1.0),
    ],
)
def test_a_reasoning_block_the_prompt_opened_is_the_responses(name: str, prompt: str, response: str, fmt: float):
    """Chat templates that open <think> in the generation prompt (R1 distills, QwQ, Qwen3.5 thinking) leave it out of
    the response tokens: the format checks read the response after it (model_turn), and only then."""
    assert example(name)({**sample(response, "4"), "prompt": prompt})["format"] == fmt


@pytest.mark.parametrize(
    "response, ground_truth, correct",
    [
        ("Adding gives 1000.\nAnswer: 1000", "1000", True),
        ("So the total is\nAnswer: $\\boxed{1,000}$.", "1000", True),
        ("answer: x = \\frac12", "\\frac{1}{2}", True),
        ("Answer: 12 cm", "12", True),
        ("Answer: 3 was my first guess.\nAfter checking:\nAnswer: 4", "4", True),  # the last line counts
        ("Answer: 4\nActually, Answer: 5", "4", False),
        ("The result is 1000.", "1000", False),  # no Answer line
        ("Answer:", "1000", False),
        ("Answer: 1,2", "12", True),  # as in the DAPO reference: commas go whenever only digits remain
        ("Answer: four", ["4", "four"], True),  # a list of accepted answers: any of them (it never matched)
        ("Answer: 4", '["4", "four"]', True),  # ... or its JSON text
        ("Answer: 5", ["4", "four"], False),
    ],
)
def test_dapo_accuracy(response: str, ground_truth: str | list[str], correct: bool) -> None:
    score = example("dapo", max_response_length=100, overlong_buffer_len=20)(sample(response, ground_truth))
    assert score == {
        "overall": 1.0 if correct else -1.0,
        "accuracy": float(correct),
        "accuracy_reward": 1.0 if correct else -1.0,
        "overlong": 0.0,
    }


@pytest.mark.parametrize("length, overlong", [(10, 0.0), (80, 0.0), (85, -0.25), (90, -0.5), (100, -1.0), (130, -1.0)])
def test_dapo_soft_overlong_punishment(length: int, overlong: float) -> None:
    function = example("dapo", max_response_length=100, overlong_buffer_len=20, overlong_penalty_factor=0.5)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        score = function(sample("Answer: 7", "7", response_length=length))
    assert bool(said) == (length > 100)  # longer than the budget given: the run's budget and the reward's differ
    assert score["overlong"] == pytest.approx(overlong)
    assert score["overall"] == pytest.approx(1.0 + 0.5 * overlong)


def test_dapo_refuses_a_sample_without_a_ground_truth() -> None:
    """data.answer_key=null: every response scored -1, and "Answer: None" +1."""
    with pytest.raises(ValueError, match="the sample has no reference answer"):
        example("dapo", max_response_length=100, overlong_buffer_len=20)(sample("Answer: None", None))


def test_dapo_rejects_a_buffer_longer_than_the_budget() -> None:
    function = example("dapo", max_response_length=10, overlong_buffer_len=20)
    with pytest.raises(ValueError, match="overlong_buffer_len=20 exceeds max_response_length=10"):
        function(sample("Answer: 7", "7"))


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
ADD = {"name": "add", "parameters": {"type": "object"}}  # the bare form of a schema
EXPECTED = '[{"name": "add", "arguments": {"a": 2, "b": 3}}]'


def _call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


@pytest.mark.parametrize(
    "response, ground_truth, accuracy, fmt, names",
    [
        (_call("add", '{"b": 3, "a": 2}'), EXPECTED, 1.0, 1.0, 1.0),  # arguments compared as JSON values
        (_call("add", '{"a": 2, "b": 3, "c": null}'), EXPECTED, 1.0, 1.0, 1.0),  # a null: not given
        (_call("add", '{"a": 2, "b": 4}'), EXPECTED, 0.0, 1.0, 1.0),
        (_call("add", '{"a": 2, "b": 3}') + _call("add", '{"a": 2, "b": 3}'), EXPECTED, 0.0, 1.0, 1.0),
        (_call("get_weather", '{"city": "Oslo"}'), EXPECTED, 0.0, 1.0, 0.0),
        (_call("multiply", '{"a": 2, "b": 3}'), EXPECTED, 0.0, 0.0, 0.0),  # a tool the row does not have
        (_call("add", '{"a": 2, "b": 3}') + "<tool_call>{oops</tool_call>", EXPECTED, 0.0, 0.0, 1.0),
        ("<think>" + _call("add", '{"a": 2, "b": 3}') + "</think> 5", EXPECTED, 0.0, 0.0, 0.0),  # only a thought
        (
            _call("add", '{"a": 2, "b": 3}'),
            [{"name": "add", "arguments": {"a": 2.0, "b": 3}}],
            1.0,
            1.0,
            1.0,
        ),  # Parquet
        ("It is sunny.", "[]", 1.0, 1.0, 1.0),  # nothing to call
        (_call("get_weather", '{"city": "Oslo"}'), "[]", 0.0, 0.0, 0.0),
        (
            _call("get_weather", '{"city": "Oslo"}') + _call("add", '{"a": 2, "b": 3}'),
            [
                {"name": "add", "arguments": {"a": 2, "b": 3}},
                {"name": "get_weather", "arguments": {"city": "Oslo", "day": None}},  # as Parquet gives an answer
            ],
            1.0,
            1.0,
            1.0,
        ),
        # the expected calls as OpenAI's messages hold them, or one call alone: a perfect call scored 0, or raised
        (_call("add", '{"a": 2, "b": 3}'), [{"name": "add", "arguments": '{"a": 2, "b": 3}'}], 1.0, 1.0, 1.0),
        (
            _call("add", '{"a": 2, "b": 3}'),
            [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}],
            1.0,
            1.0,
            1.0,
        ),
        (_call("add", '{"a": 2, "b": 3}'), {"name": "add", "arguments": {"a": 2, "b": 3}}, 1.0, 1.0, 1.0),
    ],
)
def test_tool_call(response: str, ground_truth, accuracy: float, fmt: float, names: float) -> None:
    for tools in ([WEATHER, ADD], json.dumps([WEATHER, ADD])):  # the row's tools column, or its JSON text
        scores = example("tool_call")({**sample(response, ground_truth), "extra_info": {"tools": tools}})
        assert (scores["accuracy"], scores["format"], scores["names"]) == (accuracy, fmt, names)
        assert scores["overall"] == pytest.approx(0.9 * accuracy + 0.1 * fmt)


@pytest.mark.parametrize(
    "ground_truth, message",
    [
        ("[{oops", "the expected calls '[{oops' are not JSON"),
        ([{"arguments": {}}], "an expected call is no {'name', 'arguments'} object"),
        ([{"name": "add", "arguments": "{oops"}], "the arguments of the expected call 'add' are not JSON"),
        (7, "the expected calls must be a list of calls, got int"),
    ],
)
def test_tool_call_names_expected_calls_it_cannot_read(ground_truth, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        example("tool_call")({**sample(_call("add", "{}"), ground_truth), "extra_info": {"tools": [ADD]}})


def test_tool_call_reads_the_models_own_call_format(tmp_path) -> None:
    """Given `tokenizer`, calls are read in the format its chat template writes (Qwen3.5's XML here), the arguments
    typed by the row's schemas, as a tool environment reads them; Hermes blocks then do not count as calls."""
    from verl.models.tiny_models import TOOL_CALLS, build_tokenizer

    tokenizer = build_tokenizer(kind="qwen3")
    xml = (
        "<tool_call>\n<function={{ call.function.name }}>\n{% for key, value in call.function.arguments | items %}"
        "<parameter={{ key }}>\n{{ value }}\n</parameter>\n{% endfor %}</function>\n</tool_call>"
    )
    tokenizer.chat_template = tokenizer.chat_template.replace(
        TOOL_CALLS, "{% for call in message.tool_calls or [] %}" + xml + "{% endfor %}"
    )
    tokenizer.save_pretrained(tmp_path / "qwen35_style")
    integers = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    tools = [{"type": "function", "function": {"name": "add", "parameters": integers}}]
    response = "<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n</parameter>\n"
    response += "</function>\n</tool_call>"
    score = example("tool_call", tokenizer=str(tmp_path / "qwen35_style"))
    for text, accuracy, fmt in [(response, 1.0, 1.0), (_call("add", '{"a": 2, "b": 3}'), 0.0, 0.0)]:
        scores = score({**sample(text, EXPECTED), "extra_info": {"tools": tools}})
        assert (scores["accuracy"], scores["format"]) == (accuracy, fmt)
    assert example("tool_call")({**sample(response, EXPECTED), "extra_info": {"tools": tools}})["accuracy"] == 0.0


@pytest.mark.timeout(30)  # a hang guard only: each took 10 s and more before, growing with the square of the input
def test_math_and_r1v_read_adversarial_tags_in_one_pass() -> None:
    """A "<" followed by a long run of white space (the two optional spaces around a tag's slash backtracked against
    each other) and thousands of unclosed <answer> tags (a lazy scan from each) were quadratic."""
    spaced = "<think>r</think> \\boxed{3} <" + " " * 200_000 + "x"
    assert example("math")(sample(spaced, "3"))["accuracy"] == 1.0
    unclosed = "<think>r</think>" + "<answer> The answer is 3. " * 40_000
    assert example("r1v")(sample(unclosed, "3"))["accuracy"] == 0.0
    assert example("r1v")(sample("<think>r</think>< answer >a</ answer >" + spaced, "a"))["accuracy"] == 1.0


@pytest.mark.timeout(120)  # a hang guard only: sympy ran for ever on these, in the trainer's process
@pytest.mark.parametrize("name, tagged", [("math", "\\boxed{9**9**9}"), ("r1v", "<answer>(99999999)!</answer>")])
def test_an_answer_sympy_cannot_finish_scores_zero_within_the_time_limit(name: str, tagged: str) -> None:
    """mathruler grades in the killable workers of verl.rewards.math_grading: the sample scores 0 after timeout_s,
    and the next is graded as usual."""
    score = example(name, timeout_s=1.0)
    assert score(sample(f"<think>r</think> {tagged}", "\\frac{1}{2}"))["accuracy"] == 0.0
    right = "\\boxed{0.5}" if name == "math" else "<answer>1/2</answer>"
    assert score(sample(f"<think>r</think> {right}", "\\frac{1}{2}"))["accuracy"] == 1.0
