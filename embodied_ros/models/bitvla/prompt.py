"""BitVLA's prompt and its token ids, as OFT's evaluation builds them.

The user message is one image pad token per camera image, the proprio pad token, then the question
with the task lower-cased. The chat template (the checkpoint's own, kept in the bundle as the text
before and after the message) frames it; the message is stripped of surrounding whitespace, as the
template's `trim` does. Tokenized with the checkpoint's tokenizer.json (its post-processor adds the
begin-of-text token), each image pad id is then repeated once per image token: the evaluation
repeats the pad text before tokenizing, and a special token is one id wherever it stands, so both
give the same ids.

The chat template is read from the checkpoint at conversion (`split_chat_template`): only the shape
BitVLA's checkpoint conversion writes is understood, a fixed preamble, one `Role: content<eot>` turn
per message, and a generation prompt.
"""

from __future__ import annotations

import re

import numpy as np

IMAGE_TOKEN = "<|image_pad|>"
PROPRIO_TOKEN = "<proprio_pad>"
STOP_TOKEN = "<|end_of_text|>"

_TEMPLATE = re.compile(
    r"(?P<preamble>[^{]*)"
    r"\{%-? set loop_messages = messages -?%\}"
    r"\{%-? for message in loop_messages -?%\}"
    r"\{%-? set content = message\['role'\] \| capitalize \+ '(?P<separator>[^']*)' ?\+ ?message\['content'\] \| trim"
    r" \+ '(?P<end>[^']*)' -?%\}"
    r"\{\{-? content -?\}\}\{%-? endfor -?%\}"
    r"\{%-? if add_generation_prompt -?%\}\{\{-? '(?P<generation>[^']*)' -?\}\}\{%-? endif -?%\}\s*")


def split_chat_template(template: str) -> tuple[str, str]:
    """BitVLA's chat template -> (text before the user's message, text after it); ValueError for
    any other template."""
    match = _TEMPLATE.fullmatch(template)
    if match is None:
        raise ValueError("the checkpoint's chat template is not the one BitVLA's checkpoint conversion writes; "
                         "give the prompt framing with --set prompt_before=... --set prompt_after=...")
    before = match["preamble"] + "User" + match["separator"]
    return before, match["end"] + match["generation"]


def user_message(task: str, n_images: int, question: str) -> str:
    return IMAGE_TOKEN * n_images + PROPRIO_TOKEN + question.format(task=task.lower())


def prompt_text(task: str, n_images: int, before: str, after: str, question: str) -> str:
    """The prompt as the evaluation passes it to the tokenizer (one image pad per image)."""
    return before + user_message(task, n_images, question).strip() + after


def token_ids(tokenizer, text: str, image_token: int, tokens_per_image: int) -> np.ndarray:
    """The prompt's ids with every image pad repeated `tokens_per_image` times (int64 [L])."""
    ids = np.asarray(tokenizer.encode(text, add_special_tokens=True).ids, dtype=np.int64)
    return np.repeat(ids, np.where(ids == image_token, tokens_per_image, 1))
