"""The metrics profile of docker-compose.yml, from the product's side: `check.py` says whether its
Prometheus scrapes serve and the host, and why not (docs/METRICS.md). The dashboards and the Prometheus
configuration are files (metrics/); what proves them is the lab's (sparkserve_lab.metrics)."""
