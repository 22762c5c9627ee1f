"""Which `chat_template_kwargs` a client may send: only variables the model's own template reads.

A client's kwargs go into the template's render context. Unfiltered, `chat_template` replaced the model's template
(a client template can loop for hours or write real role markers), and `tokenize`, `add_generation_prompt`,
`continue_final_message`, `tools`, `documents`, ... steered the render past what the API's own fields say. vLLM
refuses request templates unless told to trust them; here they are never accepted. What is left is the template's
undeclared variables (TemplateCaps.variables: `enable_thinking`, `clear_thinking`, ...), minus the names the
renderer sets itself, the special tokens (`bos_token`, ...) and the sandbox's globals (`raise_exception`, ...).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from agentserve.preprocess.template_caps import TemplateCaps
from agentserve.preprocess.template_render import GLOBAL_NAMES, RENDERER_NAMES
from agentserve.protocol.errors import RequestError

# tokenizer.apply_chat_template's own parameters (transformers 4.4x-5.x): none of them is a template variable.
APPLY_CHAT_TEMPLATE_PARAMS = frozenset({
    "conversation", "tools", "documents", "chat_template", "add_generation_prompt", "continue_final_message",
    "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs",
})

PARAM = "chat_template_kwargs"


class TemplateKwargs:
    """The one check of client template kwargs for one model's template."""

    def __init__(self, caps: TemplateCaps, special_tokens: Iterable[str] = ()) -> None:
        self.reserved = APPLY_CHAT_TEMPLATE_PARAMS | RENDERER_NAMES | GLOBAL_NAMES | frozenset(special_tokens)
        self.accepted = frozenset(caps.variables) - self.reserved

    def check(self, client: Mapping[str, Any]) -> dict[str, Any]:
        """The client's kwargs, or a 400 naming the first key that is not one of the template's variables."""
        for key in client:
            if key in self.reserved:
                raise RequestError(
                    "invalid_request",
                    f"{PARAM} may not set '{key}': it is not a template variable (the model's chat template is "
                    "fixed, and the render's options come from the request's own fields)",
                    param=f"{PARAM}.{key}",
                )
            if key not in self.accepted:
                names = ", ".join(sorted(self.accepted)) or "none"
                raise RequestError(
                    "invalid_request",
                    f"{PARAM} sets '{key}', which this model's chat template does not read (it reads: {names})",
                    param=f"{PARAM}.{key}",
                )
        return dict(client)
