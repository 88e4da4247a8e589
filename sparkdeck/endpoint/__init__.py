"""The stable OpenAI endpoint the service serves beside its API: one address (127.0.0.1:8400
by default) that forwards to whichever engine runs, switches engines on request where asked,
refuses at the door what it will not serve, and logs every request. See docs/endpoint.md.

It depends on the service only through the engine owner and the guard follower it is handed
(type-only imports), so the service can run it without an import cycle."""
