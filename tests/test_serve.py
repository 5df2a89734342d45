# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""The chat endpoint's request checks (`verl.serve.check_request`): one-line messages naming the field, and a 404
naming the served model, as vLLM's OpenAI server answers. tests/envs/test_serve_and_evaluate.py runs the server."""

import pytest

from verl.serve import RequestError, check_request


def request(**fields):
    return {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], **fields}


def test_a_valid_request_gives_its_sampling_options():
    assert check_request(request(), "tiny") == {}
    options = check_request(request(max_tokens=5, temperature=0.5, top_p=0.9, n=2, seed=3, stop="\n"), "tiny")
    assert options == {"max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "n": 2, "seed": 3, "stop": ["\n"]}
    assert check_request(request(max_completion_tokens=7), "tiny") == {"max_tokens": 7}


def test_an_unknown_model_is_a_404_naming_the_served_one():
    with pytest.raises(RequestError, match="'gpt-4' does not exist; this server serves 'tiny'") as error:
        check_request(request(model="gpt-4"), "tiny")
    assert error.value.status == 404


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"max_tokens": "5"}, "'max_tokens' must be an integer, got '5'."),
        ({"max_tokens": 0}, "'max_tokens' must be >= 1, got 0."),
        ({"n": True}, "'n' must be an integer, got True."),
        ({"temperature": "hot"}, "'temperature' must be a number, got 'hot'."),
        ({"temperature": 3}, "'temperature' must be between 0 and 2, got 3."),
        ({"top_p": 1.5}, "'top_p' must be between 0 and 1, got 1.5."),
        ({"stop": [1]}, "'stop' must be a string or a list of strings, got [1]."),
        ({"messages": []}, "'messages' must be a non-empty list"),
        ({"messages": ["Hi"]}, "'messages[0]' must be an object with a string 'role'."),
        ({"stream": True}, "streaming responses are not supported"),
    ],
)
def test_bad_fields_are_named_in_one_line(fields, message):
    with pytest.raises(RequestError) as error:
        check_request(request(**fields), "tiny")
    assert str(error.value).startswith(message) and "\n" not in str(error.value) and error.value.status == 400
