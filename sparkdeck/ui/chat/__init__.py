"""The chat tab: a pane per engine, its reply views and the conversations screen."""
