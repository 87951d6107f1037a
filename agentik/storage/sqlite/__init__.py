"""The SQLite backend (apsw): one writer task with group commit, pooled readers.

``open_sqlite_storage`` in ``_open.py`` wires the pieces: ``_connect`` (version
check, pragmas), ``_migrate`` (the ``user_version`` ladder), ``_queries``
(its ``Dialect`` of the SQL both backends share, ``agentik.storage._sql_*``,
and its own fast paths; synchronous, run in worker threads), ``_writer``
(SQLite's engine of the shared writer task, ``agentik.storage._writer``), and
the shared readers and stores (``agentik.storage._readers``, ``_sql_stores``).
"""

__all__: list[str] = []  # a backend, opened through agentik.storage; nothing public here
