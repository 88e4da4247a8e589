"""The memory guard in the dashboard: the watchdog line, the start-up timeline, and the
fit and switch-wait screens."""
