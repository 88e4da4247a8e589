"""Models: what a model's files say about its memory (facts), read without loading weights."""
