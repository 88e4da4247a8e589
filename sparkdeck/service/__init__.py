"""The sparkdeck service: one long-running process per user that owns sparkdeck's engine.

It launches, stops and adopts the engine, runs the memory watchdog for as long as a sparkdeck
engine runs (whoever launched it), samples the machine and the engine, and serves a local
HTTP + JSON API with an event stream over a Unix socket that only its user can open. Front
ends (the CLI, the TUI) are its clients when it runs. See docs/service.md.
"""
