"""sparkdeck: a keyboard-driven control panel for inference engines on one NVIDIA DGX Spark."""

__version__ = "0.1.0"
