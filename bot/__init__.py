"""etriage's GitHub side: the Flask app (webhook, slash commands), the GitHub adapter, the CLI."""
