"""The SQLite backend (apsw): one writer task with group commit, pooled readers.

``open_sqlite_storage`` in ``_open.py`` wires the pieces: ``_connect`` (version
check, pragmas), ``_migrate`` (the ``user_version`` ladder), ``_queries``
(synchronous SQL, run in worker threads), ``_writer`` (the batching writer
task) with its request queue ``_queue``, ``_readers`` (read-only connections)
and ``_stores`` (the protocols).
"""
