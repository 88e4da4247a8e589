"""Chat with a running engine: streaming client, reply measurements, saved conversations."""
