"""Content blocks and the media blocks' validation."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from mellea_local.core.blocks import AudioBlock, AudioUrlBlock, CBlock, ImageBlock, ImageUrlBlock


def tiny_png() -> bytes:
    """A real 1x1 grey PNG, built by hand so no imaging library is needed."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00\x80")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def test_cblock_holds_text_or_nothing():
    block = CBlock("hello", {"source": "user"})
    assert block.value == "hello" and str(block) == "hello"
    assert block.meta == {"source": "user"}
    assert repr(block) == "CBlock('hello', {'source': 'user'})"
    empty = CBlock(None)
    assert str(empty) == "" and empty.meta == {} and not empty.cache
    empty.value = "now"
    assert str(empty) == "now"


@pytest.mark.parametrize("bad", [3, b"bytes", ["x"]])
def test_cblock_rejects_non_text(bad):
    with pytest.raises(TypeError, match="str"):
        CBlock(bad)
    with pytest.raises(TypeError):
        CBlock("ok").value = bad


def test_image_block_accepts_base64_png_and_data_uri():
    encoded = base64.b64encode(tiny_png()).decode()
    assert ImageBlock(encoded).value == encoded
    assert ImageBlock("data:image/png;base64," + encoded).value == encoded
    assert ImageBlock.from_png_bytes(tiny_png()).value == encoded


def test_image_block_rejects_non_png_and_bad_base64():
    jpeg = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 16).decode()
    with pytest.raises(ValueError, match="not a PNG"):
        ImageBlock(jpeg)
    with pytest.raises(ValueError, match="base64"):
        ImageBlock("not base64 at all!")
    with pytest.raises(TypeError):
        ImageBlock(tiny_png())  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", [ImageUrlBlock, AudioUrlBlock])
def test_url_blocks_accept_only_http_urls(cls):
    assert cls("https://example.org/a.png").url == "https://example.org/a.png"
    assert str(cls("http://example.org/x")) == "http://example.org/x"
    for bad in ["file:///etc/passwd", "ftp://example.org/a", "https://", "example.org/a.png"]:
        with pytest.raises(ValueError, match="http"):
            cls(bad)
    with pytest.raises(TypeError):
        cls(None)  # type: ignore[arg-type]


def test_audio_block_validates_base64():
    encoded = base64.b64encode(b"RIFF....WAVE").decode()
    block = AudioBlock(encoded, format="wav")
    assert block.value == encoded and block.format == "wav"
    with pytest.raises(ValueError, match="base64"):
        AudioBlock("@@@")
    with pytest.raises(ValueError, match="no bytes"):
        AudioBlock("")


def test_audio_block_reads_its_format_from_a_data_uri_and_otherwise_needs_one():
    payload = base64.b64encode(b"RIFF....WAVE").decode()
    for subtype, expected in [("x-wav", "wav"), ("wave", "wav"), ("mpeg", "mp3"),
                              ("x-mp3", "mp3"), ("x-flac", "flac"), ("ogg", "ogg")]:
        uri = f"data:audio/{subtype};base64,{payload}"
        block = AudioBlock(uri)
        assert block.format == expected and block.value == uri
    assert AudioBlock(f"data:audio/wav;base64,{payload}", format="ogg").format == "ogg"
    for bad in (None, "", "   "):
        with pytest.raises(ValueError, match="non-empty"):
            AudioBlock(payload, format=bad)
    with pytest.raises(ValueError, match="Invalid base64"):
        AudioBlock("data:audio/wav;base64,@@@")
    assert AudioBlock.is_valid_base64_audio(f"data:audio/wav;base64,{payload}")
    assert not AudioBlock.is_valid_base64_audio("@@@")
    assert not AudioBlock.is_valid_base64_audio("")


def test_audio_url_block_format_is_given_or_read_from_the_extension():
    assert AudioUrlBlock("https://example.org/a.MP3").format == "mp3"
    assert AudioUrlBlock("https://example.org/a", format="wav").format == "wav"
    assert AudioUrlBlock("https://example.org/stream").format is None
    with pytest.raises(ValueError, match="non-empty"):
        AudioUrlBlock("https://example.org/a.mp3", format=" ")


def test_is_valid_base64_png_accepts_data_uris_and_rejects_other_data():
    png = base64.b64encode(tiny_png()).decode()
    assert ImageBlock.is_valid_base64_png(png)
    assert ImageBlock.is_valid_base64_png("data:image/png;base64," + png)
    assert not ImageBlock.is_valid_base64_png(base64.b64encode(b"\xff\xd8\xff").decode())
    assert not ImageBlock.is_valid_base64_png("not base64!!")
