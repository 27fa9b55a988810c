"""Health-check runners: commands and file reads with timeouts; parsing lives in the core."""
