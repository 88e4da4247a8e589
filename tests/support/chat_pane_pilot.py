"""Driving the chat pane in its host app: the window's size and sending a message."""

from __future__ import annotations

import asyncio
import functools

from textual.widgets import Input

from sparkdeck.ui.chat.views import ReplyView
from tests.support.pane_host import wait_until

SIZE = (100, 40)


def sync(test):
    """Run an async Pilot test with asyncio.run (the suite has no async plugin)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))

    return run


async def send_message(pilot, text: str) -> ReplyView:
    before = len(pilot.app.query(ReplyView))
    pilot.app.query_one("#chat-input", Input).value = text
    pilot.app.query_one("#chat-input", Input).focus()
    await pilot.press("enter")
    await wait_until(pilot, lambda: len(pilot.app.query(ReplyView)) > before, what="reply view")
    return list(pilot.app.query(ReplyView))[-1]
