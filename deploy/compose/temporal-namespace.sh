#!/bin/sh
# The namespace the service runs in: the server image (unlike the deprecated auto-setup) creates none.
# Idempotent, as temporalio/samples-server's compose/scripts/create-namespace.sh: describe first, create if absent.
set -eu

attempt=0
until temporal operator cluster health --address "${TEMPORAL_ADDRESS}"; do
    attempt=$((attempt + 1))
    if [ "${attempt}" -ge 60 ]; then
        echo "Temporal at ${TEMPORAL_ADDRESS} is not serving after 60 attempts" >&2
        exit 1
    fi
    sleep 2
done

if temporal operator namespace describe --namespace "${NAMESPACE}" --address "${TEMPORAL_ADDRESS}" >/dev/null 2>&1; then
    echo "namespace ${NAMESPACE} exists"
else
    temporal operator namespace create --namespace "${NAMESPACE}" --retention "${RETENTION}" \
        --address "${TEMPORAL_ADDRESS}"
fi
