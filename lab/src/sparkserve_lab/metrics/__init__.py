"""The metrics profile's dashboards, proved: a schema check of their JSON and of the queries' names
against the pinned vLLM (dashboards.py), and every panel's query asked of a live Prometheus that scrapes
the CPU stand-in under load (live.py; CI's serve-cpu phase, docs/METRICS.md)."""
