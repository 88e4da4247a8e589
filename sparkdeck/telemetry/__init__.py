"""The machine's telemetry: sampler (host memory, PSI and GPU read into one history) and
view (that history as plain text, shared by the TUI panels and `sparkdeck telemetry`)."""
