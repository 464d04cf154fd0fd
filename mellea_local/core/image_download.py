"""Opt-in download of an image URL into PNG base64, with a bounded per-URL cache.

Only ``make_image_block(url, convert_to_base64=True)`` and ``ImageUrlBlock.resolve_base64()``
reach here; nothing downloads implicitly. It needs the optional ``requests`` package (not a
dependency: without it the call is refused with the fix). The body is capped at
``_IMAGE_DOWNLOAD_MAX_BYTES`` and must be a PNG (convert other formats yourself).
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict

from mellea_local.errors import InvalidInputError, UnsupportedInputError

try:  # optional: the package itself never needs the network
    import requests
except ImportError:  # pragma: no cover - depends on the environment
    requests = None  # type: ignore[assignment]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IMAGE_DOWNLOAD_MAX_BYTES: int = 25 * 1024 * 1024
_IMAGE_CACHE_MAX_ENTRIES: int = 128
_image_base64_cache: OrderedDict[str, str] = OrderedDict()
_cache_lock = threading.Lock()


def _download_image_as_base64(url: str) -> str:
    if requests is None:
        raise UnsupportedInputError(
            f"Downloading {url!r} needs the optional 'requests' package (pip install requests);"
            " or fetch the PNG yourself and use ImageBlock.from_png_bytes()."
        )
    limit = _IMAGE_DOWNLOAD_MAX_BYTES
    try:
        with requests.get(url, stream=True, timeout=30) as response:
            response.raise_for_status()
            declared = response.headers.get("Content-Length")
            if declared is not None and int(declared) > limit:
                raise InvalidInputError(f"The image at {url!r} ({declared} bytes) exceeds the "
                                        f"{limit}-byte download limit.")
            body = response.raw.read(limit + 1, decode_content=True)
    except requests.RequestException as exc:
        raise InvalidInputError(f"Failed to download the image at {url!r}: {exc}") from exc
    if len(body) > limit:
        raise InvalidInputError(f"The image at {url!r} exceeds the {limit}-byte download limit.")
    if not body.startswith(_PNG_SIGNATURE):
        raise InvalidInputError(
            f"The image at {url!r} is not a PNG; convert it and pass the bytes to "
            "ImageBlock.from_png_bytes()."
        )
    return base64.b64encode(body).decode("ascii")


def _cached_download_image_as_base64(url: str) -> str:
    """``_download_image_as_base64`` memoised per URL (least recently used entries go first)."""
    with _cache_lock:
        if url in _image_base64_cache:
            _image_base64_cache.move_to_end(url)
            return _image_base64_cache[url]
    encoded = _download_image_as_base64(url)
    with _cache_lock:
        _image_base64_cache[url] = encoded
        _image_base64_cache.move_to_end(url)
        while len(_image_base64_cache) > _IMAGE_CACHE_MAX_ENTRIES:
            _image_base64_cache.popitem(last=False)
    return encoded
