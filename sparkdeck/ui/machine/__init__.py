"""The machine tab: unified memory and PSI, the GPU, the environment; and the telemetry loop."""
