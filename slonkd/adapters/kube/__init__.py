"""Kubernetes adapter (kubernetes_asyncio): watches, ownership-marked changes, leader election."""
