"""What a request's images and documents become for the model it names: the one place that knows the policy.

Each wire decoder finds the images and documents in its own shape and asks this policy, with the block's path as
its API spells it (`messages.2.content.1`, `input[3].content[0]`), what goes into the Conversation:
- a model that reads images (`ModelSpec.input_modalities` has "image") gets an ImageBlock carrying a data URL; the
  Preprocessor decodes it for the engine. Remote URLs are refused here: this server fetches nothing for a client.
- input the model does not read (an image to a text-only model; a PDF or other binary document to any model, as
  no engine here reads them) is refused with a 400 naming the block, or, with `unsupported_media: placeholder`,
  becomes a fixed text so the session goes on. The text never varies (no size, name or count in it), so a
  conversation renders to the same prompt every turn and stays a cached prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentserve.config import ModelSpec
from agentserve.preprocess.images import is_inline
from agentserve.protocol import ImageBlock, TextBlock
from agentserve.protocol.errors import RequestError

IMAGE_PLACEHOLDER = "[image omitted: this model does not read images]"
DOCUMENT_PLACEHOLDER = "[document omitted: this model does not read this document type]"


@dataclass(frozen=True, slots=True)
class MediaPolicy:
    """One catalog model's answer to images and documents (see the module docstring)."""

    images: bool = False  # the model reads images
    unsupported: Literal["error", "placeholder"] = "error"
    model: str = field(default="this model", compare=False)  # for messages only: two models alike decode alike

    @classmethod
    def of(cls, model: ModelSpec) -> "MediaPolicy":
        return cls(images="image" in model.input_modalities, unsupported=model.unsupported_media, model=model.id)

    def image(self, url: str, where: str, *, readable_here: bool = True) -> ImageBlock | TextBlock:
        """An image at `where`: the block the conversation gets. `readable_here` False: a place the model is never
        shown images (a system or assistant message), where even a vision model's template has no slot for one."""
        if not self.images:
            return TextBlock(text=self.omitted_image(where))
        if not readable_here:
            raise _bad(where, "images are read in user messages and tool results only")
        if url.startswith(("http://", "https://")):
            raise _bad(where, "a remote image URL is not fetched by this server; send the image inline as base64")
        if not is_inline(url):
            raise _bad(where, "an image must be inline: base64 data with an image/* media type "
                              "(data:image/...;base64,...)")
        return ImageBlock(url=url)

    def omitted_image(self, where: str) -> str:
        """The text an image the model cannot be shown stands as (or the refusal naming it)."""
        if self.unsupported == "error":
            raise _bad(where, f"{self.model} does not read images (its input_modalities are text only)")
        return IMAGE_PLACEHOLDER

    def document(self, what: str, where: str) -> str:
        """The text a document no engine here reads (`what`: e.g. "application/pdf documents") stands as (or the
        refusal)."""
        if self.unsupported == "error":
            raise _bad(where, f"{self.model} does not read {what}: send the document's text instead")
        return DOCUMENT_PLACEHOLDER


def file_kind(data: object) -> str:
    """What a file part holds, for a message: its data URL's media type ("application/pdf files"), else "files"."""
    if isinstance(data, str) and data.startswith("data:") and ";" in data:
        return f"{data[5:data.index(';')]} files"
    return "files"


TEXT_ONLY = MediaPolicy()  # what a decoder assumes when it is told nothing: a text-only model that refuses media


def _bad(where: str, message: str) -> RequestError:
    return RequestError("invalid_request", f"{where}: {message}", param=where)
