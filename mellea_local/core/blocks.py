"""Content blocks: the plain-data pieces a component or message is made of.

A block holds a value and nothing else; it has no opinion on how it is rendered. The media
blocks validate at construction so a bad image or URL fails where it was written, not deep
inside a backend.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any
from urllib.parse import urlparse

from mellea_local.errors import InputTypeError, InvalidInputError

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_DATA_URI = "data:image/png;base64,"
_AUDIO_DATA_URI = re.compile(r"data:audio/([A-Za-z0-9.+-]+);base64,")
# MIME subtypes that name a container under another name.
_AUDIO_FORMATS = {"wave": "wav", "mpeg": "mp3", "mpeg3": "mp3"}


class CBlock:
    """A block of text (or nothing yet), with free-form metadata.

    ``cache`` is a hint that the block is worth keeping in a KV cache; backends may ignore it.
    """

    def __init__(
        self, value: str | None, meta: dict[str, Any] | None = None, *, cache: bool = False
    ):
        if value is not None and not isinstance(value, str):
            raise InputTypeError(
                f"CBlock value should always be a string or None, got {type(value).__name__}; "
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
            raise InputTypeError(f"CBlock value must be a str or None, got {type(v).__name__}.")
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
        raise InvalidInputError(
            f"Invalid base64 in the {what} value ({exc}); pass "
            "base64.b64encode(data).decode()."
        ) from exc


def _try_decode(value: object) -> bytes | None:
    """The bytes of base64 text, or None when ``value`` is not valid base64 text."""
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _audio_format(mime_subtype: str) -> str:
    """``x-wav`` -> ``wav``, ``mpeg`` -> ``mp3``: the container name a backend expects."""
    name = mime_subtype.lower().removeprefix("x-")
    return _AUDIO_FORMATS.get(name, name)


def _checked_format(format: object, what: str) -> str:
    if not isinstance(format, str) or not format.strip():
        raise InvalidInputError(
            f"{what} format must be a non-empty string such as 'wav' or 'mp3', got "
            f"{format!r}; pass format=, or a data:audio/<format>;base64, URI."
        )
    return format.strip()


def _check_http_url(url: object, what: str) -> str:
    if not isinstance(url, str):
        raise InputTypeError(f"{what} URL must be a str, got {type(url).__name__}.")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InvalidInputError(
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
            raise InputTypeError(
                f"ImageBlock value must be base64 text, got {type(value).__name__}."
            )
        if value.startswith(_PNG_DATA_URI):
            value = value[len(_PNG_DATA_URI) :]
        if not _decode_base64(value, "ImageBlock").startswith(_PNG_SIGNATURE):
            raise InvalidInputError(
                "ImageBlock value is base64 but not a PNG image; convert the image to PNG "
                "(e.g. with Pillow: img.save(buf, format='PNG')) before encoding it."
            )
        super().__init__(value, meta)

    @staticmethod
    def is_valid_base64_png(value: str) -> bool:
        """Whether ``value`` (base64, optionally a PNG data URI) decodes to a PNG image."""
        data = _try_decode(value.removeprefix(_PNG_DATA_URI) if isinstance(value, str) else None)
        return data is not None and data.startswith(_PNG_SIGNATURE)

    @classmethod
    def from_png_bytes(cls, data: bytes, meta: dict[str, Any] | None = None) -> ImageBlock:
        """Build from raw PNG bytes, so callers need not encode by hand."""
        return cls(base64.b64encode(data).decode("ascii"), meta)


class ImageUrlBlock(CBlock):
    """An image referenced by an http(s) URL; fetched only by ``resolve_base64()``."""

    def __init__(self, url: str, meta: dict[str, Any] | None = None):
        super().__init__(_check_http_url(url, "ImageUrlBlock"), meta)

    @property
    def url(self) -> str:
        return str(self)

    def resolve_base64(self) -> str:
        """The image as PNG base64, downloaded once per URL (needs ``requests``)."""
        from mellea_local.core.image_download import _cached_download_image_as_base64

        return _cached_download_image_as_base64(self.url)


class AudioBlock(CBlock):
    """Audio as base64 text or a ``data:audio/<format>;base64,`` URI (kept as given).

    ``format`` names the container (``"wav"``, ``"mp3"``); a data URI supplies it (``x-wav``
    and ``wave`` read as ``wav``, ``mpeg`` as ``mp3``), plain base64 needs it passed.
    """

    def __init__(
        self, value: str, meta: dict[str, Any] | None = None, *, format: str | None = None
    ):
        if not isinstance(value, str):
            raise InputTypeError(
                f"AudioBlock value must be base64 text, got {type(value).__name__}."
            )
        match = _AUDIO_DATA_URI.match(value)
        payload = value[match.end():] if match else value
        if not _decode_base64(payload, "AudioBlock"):
            raise InvalidInputError(
                "AudioBlock value decodes to no bytes; pass non-empty audio data."
            )
        if format is None and match:
            format = _audio_format(match.group(1))
        self.format = _checked_format(format, "AudioBlock")
        super().__init__(value, meta)

    @staticmethod
    def is_valid_base64_audio(value: str) -> bool:
        """Whether ``value`` (base64 or an audio data URI) decodes to some bytes."""
        match = _AUDIO_DATA_URI.match(value) if isinstance(value, str) else None
        return bool(_try_decode(value[match.end():] if match else value))


class AudioUrlBlock(CBlock):
    """Audio referenced by an http(s) URL; never fetched by this package.

    ``format`` names the container; without it, the URL's file extension, if any.
    """

    def __init__(
        self, url: str, meta: dict[str, Any] | None = None, *, format: str | None = None
    ):
        super().__init__(_check_http_url(url, "AudioUrlBlock"), meta)
        if format is None:
            suffix = urlparse(url).path.rpartition(".")[2]
            self.format = suffix.lower() if "." in urlparse(url).path and suffix else None
        else:
            self.format = _checked_format(format, "AudioUrlBlock")

    @property
    def url(self) -> str:
        return str(self)


def make_image_block(
    image: Any, meta: dict[str, Any] | None = None, *, convert_to_base64: bool = False
) -> ImageBlock | ImageUrlBlock:
    """An image block from a PIL image, PNG base64 (or a PNG data URI), or an http(s) URL.

    A URL stays an ``ImageUrlBlock`` unless ``convert_to_base64=True``, which downloads it
    (once per URL; needs the optional ``requests`` package).
    """
    if isinstance(image, str):
        if image.startswith(("http://", "https://")):
            block = ImageUrlBlock(image, meta)
            return ImageBlock(block.resolve_base64(), meta) if convert_to_base64 else block
        if ImageBlock.is_valid_base64_png(image):
            return ImageBlock(image, meta)
        raise InvalidInputError(
            f"make_image_block could not interpret the string {image[:40]!r}: pass an http(s) "
            "URL, PNG base64 text or a data:image/png;base64, URI."
        )
    if hasattr(image, "save") and hasattr(image, "mode"):  # a PIL image, without importing PIL
        import io

        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return ImageBlock.from_png_bytes(buffer.getvalue(), meta)
    raise InputTypeError(
        f"make_image_block expects a PIL image or a string (URL or base64), got "
        f"{type(image).__name__}."
    )
