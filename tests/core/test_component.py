"""The Component protocol, parse wrapping and TemplateRepresentation."""

from __future__ import annotations

import pytest

from mellea_local.core.blocks import CBlock
from mellea_local.core.component import Component, TemplateRepresentation, parse
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import ComponentParseError, MelleaLocalError, UnsupportedInputError
from mellea_local.messages import Message


class Number(Component[int]):
    def parts(self):
        return []

    def format_for_llm(self):
        return TemplateRepresentation(obj=self, args={"kind": "number"})

    def _parse(self, computed):
        return int(computed.value)


class Duck:
    """Not a subclass, but has the three methods: counts as a Component."""

    def parts(self):
        return []

    def format_for_llm(self):
        return "duck"

    def _parse(self, computed):
        return None


def test_isinstance_is_structural():
    assert isinstance(Number(), Component)
    assert isinstance(Duck(), Component)
    assert isinstance(Message("user", "x"), Component)
    assert not isinstance(CBlock("x"), Component)
    assert not isinstance(ModelOutputThunk("x"), Component)


def test_parse_wraps_any_failure():
    assert parse(Number(), ModelOutputThunk("41")) == 41
    with pytest.raises(ComponentParseError, match=r"Number\._parse") as info:
        parse(Number(), ModelOutputThunk("forty-one"))
    assert isinstance(info.value.__cause__, ValueError)
    assert isinstance(info.value, MelleaLocalError)


def test_protocol_defaults_raise_not_implemented():
    class Bare(Component[str]):
        pass

    bare = Bare()
    for call in (bare.parts, bare.format_for_llm, lambda: bare._parse(ModelOutputThunk("x"))):
        with pytest.raises(NotImplementedError, match="Bare"):
            call()


def test_template_representation_defaults():
    tr = TemplateRepresentation(obj="o")
    assert tr.args == {} and tr.role is None and tr.tools is None and tr.template is None
    assert tr.thinking is None and tr.tool_calls is None and tr.tool_call_id is None
    assert TemplateRepresentation(obj="p").args is not tr.args  # no shared mutable default


def test_span_helpers_blockify_walk_and_attachments():
    from mellea_local.core.spans import (
        blockify,
        generate_walk,
        get_audio_from_component,
        get_images_from_component,
    )

    block = blockify("hi")
    assert isinstance(block, CBlock) and block.value == "hi" and blockify(block) is block
    with pytest.raises(TypeError, match="blockify"):
        blockify(3)  # type: ignore[arg-type]
    pending, done = ModelOutputThunk(None), ModelOutputThunk("x")

    class Holder(Component[str]):
        def __init__(self, *parts, images=None):
            self._parts, self.images = list(parts), images

        def parts(self):
            return self._parts

    assert generate_walk(Holder(done, Holder(pending), CBlock("c"))) == [pending]
    with pytest.raises(ValueError, match="parts"):
        generate_walk(Holder("raw text"))
    assert get_images_from_component(Holder()) is None
    assert get_images_from_component(Holder(images=[])) is None
    assert get_audio_from_component(Holder()) is None


def test_make_image_block_downloads_only_on_request_through_a_bounded_cache(monkeypatch):
    import base64
    from collections import OrderedDict

    from mellea_local.core import image_download
    from mellea_local.core.blocks import ImageBlock, ImageUrlBlock, make_image_block

    png = b"\x89PNG\r\n\x1a\n" + b"0" * 8
    fetched: list[str] = []

    class Response:
        def __init__(self, body, length=None):
            self.raw = type("Raw", (), {"read": lambda _s, n, decode_content: body[:n]})()
            self.headers = {} if length is None else {"Content-Length": str(length)}

        def raise_for_status(self):
            return None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class FakeRequests:
        RequestException = OSError

        @staticmethod
        def get(url, **kw):
            fetched.append(url)
            if "down" in url:
                raise OSError("no route")
            return Response(png * 4 if "big" in url else png, 10**9 if "huge" in url else None)

    monkeypatch.setattr(image_download, "requests", FakeRequests)
    monkeypatch.setattr(image_download, "_IMAGE_DOWNLOAD_MAX_BYTES", 40)
    monkeypatch.setattr(image_download, "_IMAGE_CACHE_MAX_ENTRIES", 2)
    monkeypatch.setattr(image_download, "_image_base64_cache", OrderedDict())
    url = "https://example.org/a.png"
    assert isinstance(make_image_block(url), ImageUrlBlock) and fetched == []
    block = make_image_block(url, convert_to_base64=True, meta={"alt": "a"})
    assert isinstance(block, ImageBlock) and block.meta == {"alt": "a"}
    assert ImageUrlBlock(url).resolve_base64() == block.value and fetched == [url]  # cached
    for other in ("https://example.org/b.png", "https://example.org/c.png"):
        ImageUrlBlock(other).resolve_base64()
    assert list(image_download._image_base64_cache) == [
        "https://example.org/b.png", "https://example.org/c.png"]  # LRU: a evicted
    for bad, match in (("down", "Failed to download"), ("big", "exceeds"),
                       ("huge", "exceeds")):
        with pytest.raises(ValueError, match=match):
            make_image_block(f"https://example.org/{bad}.png", convert_to_base64=True)
    monkeypatch.setattr(image_download, "requests", None)
    with pytest.raises(UnsupportedInputError, match="requests"):
        ImageUrlBlock("https://example.org/new.png").resolve_base64()
    same = make_image_block("data:image/png;base64," + base64.b64encode(png).decode())
    assert isinstance(same, ImageBlock)
    with pytest.raises(ValueError, match="could not interpret"):
        make_image_block(base64.b64encode(b"jpeg").decode())
    with pytest.raises(TypeError, match="PIL image or a string"):
        make_image_block(12345)
