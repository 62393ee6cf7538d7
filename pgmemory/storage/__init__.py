"""Storage: the Postgres server, connections, migrations, init and health checks."""
