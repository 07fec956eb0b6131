"""Exact wire and storage formats: the request (Avro), BookKeeper and Pulsar metadata, offload object keys."""
