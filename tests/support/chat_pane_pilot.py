"""Driving the chat pane in its host app: the window's size and sending a message."""

from __future__ import annotations

from textual.widgets import Input

from sparkdeck.ui.chat.views import ReplyView
from tests.support.pane_host import wait_until

SIZE = (100, 40)


async def send_message(pilot, text: str) -> ReplyView:
    before = len(pilot.app.query(ReplyView))
    pilot.app.query_one("#chat-input", Input).value = text
    pilot.app.query_one("#chat-input", Input).focus()
    await pilot.press("enter")
    await wait_until(pilot, lambda: len(pilot.app.query(ReplyView)) > before, what="reply view")
    return list(pilot.app.query(ReplyView))[-1]
