"""Request-body decompression (`Content-Encoding`: zstd, gzip, deflate), bounded in output size.

Codex sends zstd bodies behind the built-in OpenAI provider; gateways send gzip. Decompression is
always bounded: a small compressed body can expand without limit (a "zip bomb"), so output past the
cap is a 413, not an allocation. Each coding is undone in chunks of CHUNK_BYTES that stop as soon as the output
passes the cap: a bomb costs at most the cap plus one chunk of memory and the time to decompress that much, never
the size it would expand to.
"""

from __future__ import annotations

import io
import zlib

import zstandard

from agentserve.protocol.errors import RequestError

MAX_DECOMPRESSED_BYTES = 8 * 1024 * 1024  # LimitsSpec.max_decompressed_bytes' default
CHUNK_BYTES = 256 * 1024
SUPPORTED = ("zstd", "gzip", "x-gzip", "deflate", "identity")


def _too_large(cap: int) -> RequestError:
    return RequestError("too_large", f"request body exceeds {cap} bytes after decompression")


def _malformed(encoding: str, exc: Exception) -> RequestError:
    return RequestError("invalid_request", f"request body is not valid {encoding} data: {exc}")


def _zstd(data: bytes, cap: int) -> bytes:
    out = bytearray()
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
        while chunk := reader.read(min(CHUNK_BYTES, cap + 1 - len(out))):
            out += chunk
            if len(out) > cap:
                raise _too_large(cap)
    except zstandard.ZstdError as exc:
        raise _malformed("zstd", exc) from exc
    return bytes(out)


def _zlib(data: bytes, cap: int, wbits: int, name: str) -> bytes:
    d = zlib.decompressobj(wbits)
    out = bytearray()
    pending = data
    try:
        while not d.eof:
            chunk = d.decompress(pending, CHUNK_BYTES)
            pending = d.unconsumed_tail
            if not chunk and not pending:  # input used up, nothing left in zlib's buffers
                break
            out += chunk
            if len(out) > cap:
                raise _too_large(cap)
    except zlib.error as exc:
        raise _malformed(name, exc) from exc
    if not d.eof:
        raise _malformed(name, ValueError("truncated stream"))
    return bytes(out)


def _deflate(data: bytes, cap: int) -> bytes:
    # HTTP "deflate" is zlib-wrapped (RFC 9110), but some clients send raw deflate.
    try:
        return _zlib(data, cap, zlib.MAX_WBITS, "deflate")
    except RequestError as err:
        if err.kind != "invalid_request":
            raise
        return _zlib(data, cap, -zlib.MAX_WBITS, "deflate")


def decode_body(raw: bytes, content_encoding: str | None, cap: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """The request body with every listed coding undone (last applied first)."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    unknown = [c for c in codings if c not in SUPPORTED]
    if unknown:
        raise RequestError(
            "unsupported_media_type",
            f"unsupported Content-Encoding '{unknown[0]}'; supported: zstd, gzip, deflate, identity",
            param="Content-Encoding",
        )
    data = raw
    for coding in reversed(codings):
        if coding == "zstd":
            data = _zstd(data, cap)
        elif coding in ("gzip", "x-gzip"):
            data = _zlib(data, cap, 16 + zlib.MAX_WBITS, "gzip")
        elif coding == "deflate":
            data = _deflate(data, cap)
    if len(data) > cap:
        raise _too_large(cap)
    return data
