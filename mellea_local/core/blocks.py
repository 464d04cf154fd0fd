"""Content blocks: the plain-data pieces a component or message is made of.

A block holds a value and nothing else; it has no opinion on how it is rendered. The media
blocks validate at construction so a bad image or URL fails where it was written, not deep
inside a backend.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any
from urllib.parse import urlparse

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_DATA_URI = "data:image/png;base64,"


class CBlock:
    """A block of text (or nothing yet), with free-form metadata.

    ``cache`` is a hint that the block is worth keeping in a KV cache; backends may ignore it.
    """

    def __init__(
        self, value: str | None, meta: dict[str, Any] | None = None, *, cache: bool = False
    ):
        if value is not None and not isinstance(value, str):
            raise TypeError(
                f"CBlock value must be a str or None, got {type(value).__name__}; "
                "convert it with str() or wrap structured data in a Component."
            )
        self._underlying_value = value
        self._meta: dict[str, Any] = {} if meta is None else meta
        self.cache = cache

    @property
    def value(self) -> str | None:
        return self._underlying_value

    @value.setter
    def value(self, v: str | None) -> None:
        if v is not None and not isinstance(v, str):
            raise TypeError(f"CBlock value must be a str or None, got {type(v).__name__}.")
        self._underlying_value = v

    @property
    def meta(self) -> dict[str, Any]:
        return self._meta

    def __str__(self) -> str:
        return self._underlying_value or ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._underlying_value!r}, {self._meta!r})"


def _decode_base64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(
            f"{what} value is not valid base64 ({exc}); pass base64.b64encode(data).decode()."
        ) from exc


def _check_http_url(url: object, what: str) -> str:
    if not isinstance(url, str):
        raise TypeError(f"{what} URL must be a str, got {type(url).__name__}.")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(
            f"{what} accepts only http(s) URLs with a host, got {url!r}; "
            "for local data use the base64 block instead."
        )
    return url


class ImageBlock(CBlock):
    """A PNG image as base64 text (a ``data:image/png;base64,`` prefix is accepted and dropped).

    The PNG signature is checked because backends pass the bytes on blindly; a JPEG or a
    truncated string would otherwise surface as an opaque decoder error far from its source.
    """

    def __init__(self, value: str, meta: dict[str, Any] | None = None):
        if not isinstance(value, str):
            raise TypeError(f"ImageBlock value must be base64 text, got {type(value).__name__}.")
        if value.startswith(_PNG_DATA_URI):
            value = value[len(_PNG_DATA_URI) :]
        if not _decode_base64(value, "ImageBlock").startswith(_PNG_SIGNATURE):
            raise ValueError(
                "ImageBlock value is base64 but not a PNG image; convert the image to PNG "
                "(e.g. with Pillow: img.save(buf, format='PNG')) before encoding it."
            )
        super().__init__(value, meta)

    @classmethod
    def from_png_bytes(cls, data: bytes, meta: dict[str, Any] | None = None) -> ImageBlock:
        """Build from raw PNG bytes, so callers need not encode by hand."""
        return cls(base64.b64encode(data).decode("ascii"), meta)


class ImageUrlBlock(CBlock):
    """An image referenced by an http(s) URL; never fetched by this package."""

    def __init__(self, url: str, meta: dict[str, Any] | None = None):
        super().__init__(_check_http_url(url, "ImageUrlBlock"), meta)

    @property
    def url(self) -> str:
        return str(self)


class AudioBlock(CBlock):
    """Audio as base64 text; ``format`` names the container (e.g. ``"wav"``)."""

    def __init__(self, value: str, meta: dict[str, Any] | None = None, *, format: str = "wav"):
        if not isinstance(value, str):
            raise TypeError(f"AudioBlock value must be base64 text, got {type(value).__name__}.")
        if not _decode_base64(value, "AudioBlock"):
            raise ValueError("AudioBlock value decodes to no bytes; pass non-empty audio data.")
        super().__init__(value, meta)
        self.format = format


class AudioUrlBlock(CBlock):
    """Audio referenced by an http(s) URL; never fetched by this package."""

    def __init__(self, url: str, meta: dict[str, Any] | None = None):
        super().__init__(_check_http_url(url, "AudioUrlBlock"), meta)

    @property
    def url(self) -> str:
        return str(self)
