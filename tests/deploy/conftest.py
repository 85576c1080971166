"""Deployment checks: the chart, the image's packaging and locks, the generated docs.

No servers: helm renders locally (built once into ~/.cache/pacer/tools by `make helm`), and
the lock check asks the package index only when it resolves afresh.
"""
