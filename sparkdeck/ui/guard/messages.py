"""The message both watchdogs post: the running one (WatchdogLine's) and a launch's
start-up one (through the launch's events)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:  # loaded with the first watchdog, after the TUI's first frame
    from sparkdeck.guard.policy import Decision


@dataclass
class GuardDecisionMade(Message):
    """The watchdog decided on its newest reading (ok, warn or stop)."""

    decision: Decision

    def can_replace(self, message: Message) -> bool:
        # The latest reading wins, except that a stop must never be replaced unseen.
        return isinstance(message, GuardDecisionMade) and message.decision.level != "stop"
