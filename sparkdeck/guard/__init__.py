"""The memory guard (issue 5): what a preset will claim and whether it fits, the watchdog
policy over a window of readings, the safe-switch wait, and the start-up timeline.

Pure decisions live in `claims`, `fit`, `policy`, `switch` and `timeline`; `readings` reads the
host, `watchdog` and `startup` are loop bodies that take injected readers, clocks and actions.
"""
