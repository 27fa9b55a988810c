"""Runtime: the de-duplicating work queue, reconcile loops, one root TaskGroup, shutdown."""
