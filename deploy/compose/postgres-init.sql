-- Temporal's visibility database. The PostgreSQL image creates the `temporal` database (POSTGRES_USER's name)
-- and runs this file once, on an empty data volume, so deploy/compose/temporal-schema.sh needs no `create`
-- step and stays safe to run on every start.
CREATE DATABASE temporal_visibility;
