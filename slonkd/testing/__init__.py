"""Real services on loopback for the test suite and the sandbox (never imported by the product).

It lives inside the package, not under tests/, because ``slonkd sandbox`` (the README's
first command) brings up the same services as the tests: SLURM 22.05 (munged, slurmctld,
slurmd) in a PID namespace, mosquitto, a Kubernetes control plane with kwok nodes, and a
kubelet stand-in that binds worker pods to slurmd processes.
"""
