"""Metrics and traces of the service: what operators scrape (Prometheus) and follow (OTLP to Jaeger)."""
