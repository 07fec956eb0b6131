#!/bin/sh
# Temporal's schema on PostgreSQL, run by the temporalio/admin-tools image before the server starts, as
# temporalio/samples-server's compose/scripts/setup-postgres.sh does. The databases exist already
# (postgres-init.sql), so this runs on every start: `setup-schema -v 0.0` leaves a database past version 0.0
# alone and `update-schema` applies only the versions it has not applied yet.
set -eu

schema_dir=/etc/temporal/schema/postgresql/v12

for pair in temporal:temporal temporal_visibility:visibility; do
    database=${pair%%:*}
    versions=${pair##*:}
    echo "schema of ${database}"
    temporal-sql-tool --plugin postgres12 --ep "${POSTGRES_SEEDS}" -p "${DB_PORT}" -u "${POSTGRES_USER}" \
        --db "${database}" setup-schema -v 0.0
    temporal-sql-tool --plugin postgres12 --ep "${POSTGRES_SEEDS}" -p "${DB_PORT}" -u "${POSTGRES_USER}" \
        --db "${database}" update-schema -d "${schema_dir}/${versions}/versioned"
done
