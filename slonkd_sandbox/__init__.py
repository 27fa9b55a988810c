"""slonkd's test harness and local sandbox: real services on loopback, a distribution of its own.

What it brings up for the contract and end-to-end tests and for ``slonkd sandbox`` (the
README's first command): SLURM 22.05 (munged, slurmctld, slurmd) in a PID namespace,
mosquitto, a Kubernetes control plane with kwok nodes and a kubelet stand-in that binds
worker pods to slurmd processes, or the Helm chart on a real kubelet node; the Go toolchain
that builds the Kubernetes binaries and the SLURM roots of other releases.

It is not shipped. The product's wheel (the repository root's ``pyproject.toml``, packages
``slonkd`` and ``slonkd.*`` only) and every image ``container/build.sh`` builds from that wheel
hold none of it; ``slonkd_sandbox/pyproject.toml`` makes it the distribution
``slonkd-sandbox``, which ``scripts/bootstrap`` installs editable next to slonkd. It is the
top layer of the import-linter contract: it imports slonkd, slonkd never imports it.
``slonkd sandbox`` reaches it through the entry point group ``slonkd.commands``.

Neighbours: :mod:`slonkd` (the product it runs and tests), :mod:`slonkd.cli.commands` (finds
:mod:`slonkd_sandbox.command`), ``tests/`` (its fixtures and tests) and ``bench/``
(benchmarks against the same services).
"""
