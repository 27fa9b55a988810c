"""Benchmarks against the real services: a table for people, then one JSON line."""
