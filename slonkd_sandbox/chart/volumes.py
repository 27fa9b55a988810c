"""``local`` PersistentVolumes on the real node, pre-bound to the chart's claims.

The node has no provisioner, so the harness does what an administrator without one does:
a directory on the node per claim, a ``local`` PersistentVolume with node affinity and a
``claimRef`` naming the claim it is for. Used by :mod:`slonkd_sandbox.chart.release` (the
release's own claims and the site's home) and by tests that turn optional parts on
(accounting's database).
"""

from __future__ import annotations

from pathlib import Path

from slonkd_sandbox.realnode.node import RealNode


def local_volume(node: RealNode, *, name: str, ns: str, claim: str, modes: list[str]) -> Path:
    """A ``local`` PersistentVolume on the node, pre-bound to claim ``ns/claim``; its directory."""
    path = node.hostpath_dir / name
    path.mkdir(parents=True)
    affinity = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node.name]}
    spec = {
        "capacity": {"storage": "1Gi"},
        "accessModes": modes,
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "local": {"path": str(path)},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [affinity]}]}},
        "claimRef": {"namespace": ns, "name": claim},
    }
    node.cluster.api.request(
        "POST",
        "/api/v1/persistentvolumes",
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}}
        | {"spec": spec},
    )
    return path


def claim_volumes(node: RealNode, ns: str, *, release: str, home_claim: str) -> Path:
    """``local`` PersistentVolumes on the node, pre-bound to the chart's claims and the home's.

    The home claim is ReadWriteMany, as ``home.existingClaim`` wants (the chart only names it);
    returns the home volume's directory.
    """
    made = [
        local_volume(node, name=f"pv-{ns}-{i}", ns=ns, claim=claim, modes=modes)
        for i, (claim, modes) in enumerate(
            (
                (f"state-{release}-slurmctld-0", ["ReadWriteOnce"]),
                (f"{release}-mosquitto-data", ["ReadWriteOnce"]),
                (home_claim, ["ReadWriteMany"]),
            )
        )
    ]
    # The site's home claim (the chart only names it).
    node.cluster.api.request(
        "POST",
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": home_claim},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": f"pv-{ns}-2",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    return made[2]
