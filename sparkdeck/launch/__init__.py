"""The one launch sequence: plan (what will be stopped, flush or not, the fit verdict, the
memory knob) -> confirm (the front end's prompt or dialog) -> run.

plan (LaunchPlan), events (the typed LaunchEvent union the front ends render), sequence (the
Launcher that runs a plan), preflight (checks that need nothing stopped) and failure (what a
failed launch leaves on record). Importing the package loads nothing: the TUI imports plan
and events before its first frame, and sequence pulls in the docker SDK.
"""
