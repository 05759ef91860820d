"""The prompt of a chat request: the tokenizer's chat template when it has one, else ours.

With a template (`tokenizer.chat_template`, HF `apply_chat_template` with the generation
prompt), the rendered text is tokenized without adding special tokens: the template writes
its own BOS, and adding another would double it (as `apply_chat_template(tokenize=True)`
and vLLM do). Without one (our tiny models), the plain template below is used and
tokenized like any completion prompt:

    system: You are terse.
    user: 2+2?
    assistant:

one `role: content` line per message, then `assistant:` with nothing after it, so the
model writes the reply's first token right after the colon (docs/serving.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jinja2 import TemplateError

from rayworks.platform.openai_schema import APIError, ChatMessage

GENERATION_PROMPT = "assistant:"


def plain_chat(messages: Sequence[ChatMessage]) -> str:
    """The plain template: `role: content` lines, then the generation prompt."""
    return "".join(f"{m.role}: {m.content}\n" for m in messages) + GENERATION_PROMPT


def chat_prompt_text(tok: Any, messages: Sequence[ChatMessage]) -> str:
    """The chat's prompt text: the tokenizer's template with the generation prompt, else
    the plain template; 400 naming `messages` if the template refuses them (templates
    raise on, e.g., roles that do not alternate)."""
    if not getattr(tok, "chat_template", None):
        return plain_chat(messages)
    rows = [{"role": m.role, "content": m.content} for m in messages]
    try:
        return tok.apply_chat_template(rows, tokenize=False, add_generation_prompt=True)
    except TemplateError as err:
        raise APIError(
            400,
            f"the model's chat template refused these messages: {err}",
            param="messages",
            code="invalid_messages",
        ) from None


def chat_prompt_ids(tok: Any, messages: Sequence[ChatMessage]) -> list[int]:
    """Token ids of the chat's prompt (`chat_prompt_text`): a template's text without added
    special tokens (it writes its own BOS), the plain template's like any prompt."""
    text = chat_prompt_text(tok, messages)
    if not getattr(tok, "chat_template", None):
        return tok(text).input_ids
    return tok(text, add_special_tokens=False).input_ids
