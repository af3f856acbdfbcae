"""GR00T N1.7's prompt at token level: the Qwen3-VL chat template
"<|im_start|>user\\n{images}{task}<|im_end|>\\n", each image a block
<|vision_start|> <|image_pad|> x tokens-of-that-view <|vision_end|>.

The text pieces ("user\\n", the task, "\\n") arrive as token ids; turning text into those ids needs
Qwen's tokenizer, which bundles do not carry yet.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from embodied_ros.models.groot.config import TokenIds


def prompt_ids(tokens: TokenIds, role_ids: Sequence[int], view_tokens: Sequence[int], task_ids: Sequence[int],
               newline_ids: Sequence[int]) -> np.ndarray:
    """Token ids [L] of one prompt; `view_tokens` holds the LM token count of each present view in order."""
    ids = [tokens.im_start, *role_ids]
    for count in view_tokens:
        ids += [tokens.vision_start, *([tokens.image] * int(count)), tokens.vision_end]
    ids += [*task_ids, tokens.im_end, *newline_ids]
    return np.asarray(ids, np.int64)
