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
"""The request fields verl.serve's chat and text completions share: their checks (a RequestError names the field, as
OpenAI's 400s do), the sampling options they map to, and the ranking of alternative tokens for `logprobs`."""

from typing import Any


class RequestError(ValueError):
    """A request the server refuses: HTTP `status` with a one-line message, as vLLM's OpenAI server answers it."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def number(request: dict[str, Any], key: str, integer: bool, low: float, high: float | None = None) -> Any:
    value = request.get(key)
    if value is None:
        return None
    wanted = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, wanted):
        raise RequestError(f"'{key}' must be {'an integer' if integer else 'a number'}, got {value!r}.")
    if value < low or (high is not None and value > high):
        bounds = f">= {low:g}" if high is None else f"between {low:g} and {high:g}"
        raise RequestError(f"'{key}' must be {bounds}, got {value!r}.")
    return value


def check_model(request: Any, served_name: str) -> None:
    """A RequestError unless `request` is a JSON object for the served model: an unknown `model` is a 404 naming
    the served one; no `model` means the served one (as vLLM's server answers)."""
    if not isinstance(request, dict):
        raise RequestError("the request body must be a JSON object.")
    model = request.get("model")
    if model is not None and model != served_name:
        raise RequestError(
            f"The model {model!r} does not exist; this server serves {served_name!r}.", 404, "NotFoundError"
        )


def logit_bias(request: dict[str, Any]) -> dict[int, float] | None:
    """The request's `logit_bias` as {token id: bias}: keys are token ids (JSON strings of integers), values
    numbers from -100 to 100, as OpenAI's API takes them."""
    bias = request.get("logit_bias")
    if bias is None:
        return None
    if not isinstance(bias, dict):
        raise RequestError(f"'logit_bias' must be an object of token ids to biases, got {bias!r}.")
    parsed = {}
    for token, value in bias.items():
        try:
            token_id = int(token)
        except ValueError:
            raise RequestError(f"'logit_bias' keys must be integer token ids, got {token!r}.") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -100 <= value <= 100:
            raise RequestError(f"'logit_bias[{token}]' must be a number between -100 and 100, got {value!r}.")
        parsed[token_id] = float(value)
    return parsed


def sampling_options(request: dict[str, Any]) -> dict[str, Any]:
    """SamplingParams keywords of the fields chat and text completions share (None where unset)."""
    options = {
        "temperature": number(request, "temperature", False, 0.0, 2.0),
        "top_p": number(request, "top_p", False, 0.0, 1.0),
        "n": number(request, "n", True, 1),
        "seed": number(request, "seed", True, -(2**63)),
        "logit_bias": logit_bias(request),
    }
    stop = request.get("stop")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(item, str) for item in stop):
            raise RequestError(f"'stop' must be a string or a list of strings, got {request['stop']!r}.")
        options["stop"] = stop
    return {key: value for key, value in options.items() if value is not None}


def ranked(alternatives: dict[int, Any], top: int) -> list[tuple[int, Any]]:
    """The `top` most likely (token id, vLLM Logprob) of a position, most likely first (the engine also returns the
    sampled token, whatever its rank)."""
    best = [(logprob.rank, token_id) for token_id, logprob in alternatives.items() if logprob.rank <= top]
    return [(token_id, alternatives[token_id]) for _, token_id in sorted(best)]
