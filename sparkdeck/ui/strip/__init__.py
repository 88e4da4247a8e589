"""The at-a-glance strip (sparkdeck.ui.strip.glance)."""
