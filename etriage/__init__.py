"""The `etriage` command line and the local tools it starts (serve, replay, demo): the top of
the stack, which may import `tasks`, `bot` and `triage_rules`. Nothing below imports it."""
