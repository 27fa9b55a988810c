"""Adapters: every piece of I/O (SLURM, Kubernetes, MQTT, health probes).

Each sits behind a small typed interface that returns :mod:`slonkd.core` types and raises
slonkd errors, never library ones.
"""
