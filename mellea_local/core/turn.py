"""What core knows of a chat turn: it has a role and text content.

Contexts pin the leading system messages and spot the model's answers by role, so core needs
to recognise a chat turn, but ``Message`` lives in the messages stage, which builds on core.
``Message`` derives from ``ChatTurn``; core asks ``has_role`` and never imports messages.
"""

from __future__ import annotations


class ChatTurn:
    """Base of every chat turn (``mellea_local.messages.Message``): a ``role`` and a str
    ``content``. Only the attributes are declared here; the messages stage builds them."""

    role: str

    @property
    def content(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} must define content.")


def has_role(span: object, role: str) -> bool:
    """Whether ``span`` is a chat turn of ``role`` (other entries have no role)."""
    return isinstance(span, ChatTurn) and span.role == role
