"""Development-only code: the GitHub API double and the fixture copies the demo and the tests
replay. `etriage serve --github-double`, `etriage demo` and the tests use it; the service
(`bot/`, `tasks/`) never imports it."""
