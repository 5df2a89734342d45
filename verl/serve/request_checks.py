# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Request bodies read into vLLM's typed OpenAI models as vLLM's server reads them, except that a field this server
does not carry out is refused with a 400 naming it: no setting is silently dropped."""

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError


M = TypeVar("M", bound=BaseModel)

INFORMATIONAL = {"user", "metadata", "safety_identifier", "prompt_cache_key"}
"""Fields that only label a request (OpenAI logs them): accepted, nothing to carry out."""
SAMPLING_FIELDS = {
    "model", "max_tokens", "n", "seed", "stop", "stop_token_ids", "stream", "stream_options", "temperature", "top_p",
    "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias", "logprobs",
    "response_format", "structured_outputs", "ignore_eos", "min_tokens", "include_stop_str_in_output",
    "skip_special_tokens", "spaces_between_special_tokens", "allowed_token_ids", "bad_words",
}  # fmt: skip
"""The fields chat and completions requests share that this server carries out."""


class RequestError(ValueError):
    """A request the server refuses: HTTP `status` with a one-line message, as vLLM's OpenAI server answers it."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def _path(location: tuple[Any, ...]) -> str:
    """`messages[0].role` for pydantic's ('messages', 0, 'ChatCompletionUserMessageParam', 'role'): tags left out."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not any(mark in part for mark in "[(-") and part[:1].islower() and part not in ("str", "int", "list"):
            path += f".{part}" if path else part
    return path


def _message(error: ValidationError) -> str:
    """One line naming the first bad field of a failed validation; of a union's branches, one whose type the input
    has (`stop: [5 strings]` is a list too long, not "not a string") and whose fixed values it has (a user message
    whose content is a number: the user message's content, not "role should be 'developer'")."""
    errors = error.errors(include_url=False)
    other_kinds = {e["loc"][:-1] for e in errors if e["type"] == "literal_error"}  # branches of another role, ...
    kept = [e for e in errors if not any(e["loc"][: len(k)] == k for k in other_kinds)]
    if other_kinds and kept:  # the first branch left (the union's order: a user message before vLLM's own kinds)
        depth = len(next(iter(other_kinds)))
        errors = [e for e in kept if e["loc"][:depth] == kept[0]["loc"][:depth]]
    first = next(
        (e for e in errors if e["loc"][:1] == errors[0]["loc"][:1] and not e["type"].endswith("_type")), errors[0]
    )
    message = first["msg"].removeprefix("Value error, ").rstrip(".")
    path = _path(first["loc"])
    if not path:
        return f"{message}."
    shown = repr(first.get("input"))
    got = f", got {shown}" if len(shown) <= 80 and first["type"] != "missing" else ""
    return f"'{path}': {message}{got}."


def parse(model: type[M], body: Any, served_name: str, honoured: set[str]) -> M:
    """`body` as a `model` request, or a RequestError naming the first bad field: an unknown `model` is a 404 (none
    means the served one); a field outside `honoured` and INFORMATIONAL must be absent or its default."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object.")
    name = body.get("model")
    if name is not None and name != served_name:
        raise RequestError(
            f"The model {name!r} does not exist; this server serves {served_name!r}.", 404, "NotFoundError"
        )
    try:
        request = model.model_validate(body)
    except ValidationError as error:
        raise RequestError(_message(error)) from None
    except Exception as error:  # vLLM's own checks (VLLMValidationError, naming the field in `parameter`)
        message, field = str(error.args[0] if error.args else error), getattr(error, "parameter", None)
        refused = RequestError(f"'{field}': {message}" if field else message)
        refused.parameter = field  # (the error object's `param`, as vLLM's server sends it)
        raise refused from None
    fields = type(request).model_fields
    allowed = honoured | INFORMATIONAL
    for key in body:
        if key in allowed:
            continue
        if key not in fields:
            if body[key] is None or (key == "store" and not body[key]):  # unset (null); nothing is stored either way
                continue
            raise RequestError(f"'{key}' is not a field this server knows; leave it out.")
        if getattr(request, key) != fields[key].get_default(call_default_factory=True):
            raise RequestError(f"'{key}' is not supported by this server; leave it out or send its default.")
    return request


def check_options(request: Any) -> None:
    """A RequestError for what chat and completions requests both refuse: continuous usage stats in a stream, or a
    `logit_bias` other than integer token ids mapped to numbers in [-100, 100] (as OpenAI's API)."""
    if request.stream_options is not None and request.stream_options.continuous_usage_stats:
        raise RequestError("'stream_options.continuous_usage_stats' is not supported by this server; leave it out.")
    for token, value in (request.logit_bias or {}).items():
        if not token.lstrip("-").isdigit():
            raise RequestError(f"'logit_bias' keys must be integer token ids, got {token!r}.")
        if not -100 <= value <= 100:
            raise RequestError(f"'logit_bias[{token}]' must be a number between -100 and 100, got {value!r}.")


def ranked(alternatives: dict[int, Any], top: int) -> list[tuple[int, Any]]:
    """The `top` most likely (token id, vLLM Logprob) of a position, best first (the sampled token may be extra)."""
    best = [(logprob.rank, token_id) for token_id, logprob in alternatives.items() if logprob.rank <= top]
    return [(token_id, alternatives[token_id]) for _, token_id in sorted(best)]


ENGINE_FAILED = "The engine failed this request (vLLM's finish_reason 'error', an internal error); send it again."
"""The 500 of a request the engine ended with an error (its partial text is not a reply)."""


def check_within_context(wanted: int | None, max_model_len: int, key: str) -> None:
    """Refuse a request for more output tokens than the whole context, naming the request's `key`."""
    if wanted is not None and wanted > max_model_len:
        raise RequestError(
            f"This model's maximum context length is {max_model_len} tokens (--max-model-len); {key}={wanted} "
            "cannot be greater. Request fewer output tokens."
        )


def context_budget(
    wanted: int | None, room: int, max_model_len: int, defaults: dict[str, Any], key: str = "max_tokens"
) -> int:
    """The completion's token budget, as vLLM's server sets it: the request's `key` (or else the model's
    generation-config default, or else the rest of the context), cut down to the `room` the prompt leaves; a request
    for more than the whole context is refused."""
    check_within_context(wanted, max_model_len, key)
    if wanted is None:
        wanted = defaults.get("max_tokens") or room
    return min(wanted, room)


def token_usage(prompt: int, completion: int) -> dict[str, int]:
    """OpenAI's `usage` token counts."""
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
