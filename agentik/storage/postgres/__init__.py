"""The PostgreSQL backend (synchronous psycopg 3 in worker threads): one writer
task with group commit, pooled readers, as SQLite's.

``open_postgres_storage`` in ``_open.py`` wires the pieces: ``_connect``
(session settings and bounds), ``_dsn`` (reading a DSN, showing it without
its secrets), ``_watchdog`` (the client's bound on each call), ``_migrate``
(the version ladder), ``_queries`` (its ``Dialect`` of the SQL both backends
share, ``agentik.storage._sql_*``, and its own fast paths; synchronous, run
in worker threads), ``_writer`` (the engine the shared writer task drives)
and the shared stores (``agentik.storage._sql_stores``).
"""

__all__: list[str] = []  # a backend, opened through agentik.storage; nothing public here
