"""The audit log: one record per decided request, kept in object storage as date-partitioned Parquet.

``notes`` is pure (the workflow imports it); ``record`` is the Parquet schema, ``writer`` the group-committing
writer of the pulsar pool, ``reader`` the queries of ``ledger-deletion audit``. Nothing here is imported by
the package itself, so the workflow never loads pyarrow or boto3.
"""
