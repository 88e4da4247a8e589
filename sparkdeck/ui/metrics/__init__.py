"""The metrics tab: the engine's own numbers (tok/s, queue, KV cache, TTFT)."""
