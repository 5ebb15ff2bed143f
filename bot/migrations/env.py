"""Alembic's environment for the store: always run from bot.store.migrate with a connection
and the store's table prefix (tests share one PostgreSQL and namespace their tables)."""
from alembic import context

connection = context.config.attributes["connection"]
prefix = context.config.attributes.get("prefix", "")
context.configure(connection=connection, version_table=f"{prefix}alembic_version")
with context.begin_transaction():
    context.run_migrations(prefix=prefix)
