"""Images for a vision model: the text its template renders for one image, and the images themselves.

The prompt crosses to the engine as token ids, so an image is rendered as the template's own placeholder (Qwen2-VL's
`<|vision_start|><|image_pad|><|vision_end|>`, Gemma 3's `<start_of_image>`) where it stood, and travels beside the
ids as its encoded bytes; vLLM expands each placeholder to the image's tokens when it reads the i-th image for the
i-th placeholder. That is what vLLM itself does for templates that take string content.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from typing import Any, Callable

from agentserve.protocol.errors import RequestError

_BEFORE, _AFTER = "PROBE_BEFORE_IMAGE_9c1e", "PROBE_AFTER_IMAGE_9c1e"
_DATA_URL = re.compile(r"data:image/[A-Za-z0-9.+-]+;base64,", re.ASCII)


def probe_placeholder(render: Callable[[list[dict[str, Any]]], str]) -> str | None:
    """What the template writes for an image part between two text parts (None: it has no image slot, e.g. it
    renders the part list as a Python repr, or fails on it)."""
    message = {"role": "user", "content": [
        {"type": "text", "text": _BEFORE}, {"type": "image"}, {"type": "text", "text": _AFTER}]}
    try:
        text = render([message])
    except Exception:  # noqa: BLE001 - a template that cannot take content parts has no placeholder
        return None
    start, end = text.find(_BEFORE), text.find(_AFTER)
    if start < 0 or end < 0:
        return None
    between = text[start + len(_BEFORE):end]
    if not between.strip() or "type" in between:
        return None
    return between


def is_inline(url: str) -> bool:
    """An image the request carries itself (`data:image/...;base64,`): the only kind served (nothing is fetched)."""
    return _DATA_URL.match(url) is not None


def image_bytes(url: str, index: int) -> bytes:
    """The encoded image a data URL carries (decoders let only `data:image/...;base64,` through), checked to be one
    Pillow can read, so a bad image is a 400 here and never an engine failure."""
    from PIL import Image, UnidentifiedImageError

    m = _DATA_URL.match(url)
    if m is None:
        raise _bad(index, "is not an inline base64 image")
    try:
        data = base64.b64decode(url[m.end():], validate=True)
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
    except (binascii.Error, ValueError, UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise _bad(index, f"cannot be decoded ({exc})") from exc
    return data


def open_image(data: bytes) -> Any:
    """A PIL image of encoded bytes, in RGB, as vLLM's own loader hands images to the model's processor."""
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()
    return image.convert("RGB")


def _bad(index: int, what: str) -> RequestError:
    return RequestError("invalid_request", f"image {index + 1} of the conversation (in order) {what}")
