"""The models view: the library of models on this machine and pulls started from it."""
