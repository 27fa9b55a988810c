"""Tiny container images for the real node, assembled without a registry or a builder.

One layer holds Debian's static busybox (package ``busybox-static``) with a link for every
applet; two images share it: ``slonkd.local/pause`` (the pod sandbox: a ``sleep`` that never
ends, PID 1 of its own PID namespace) and ``slonkd.local/busybox`` (test containers). Both go
into one OCI archive that ``ctr images import`` reads. The tar and JSON are written with
fixed timestamps and owners, so the content is reproducible: the tag is a hash of it and the
archive is cached under ``$HOME/.cache/slonkd/images`` (``SLONKD_IMAGES_CACHE``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slonkd_sandbox.procs import HarnessError
from slonkd_sandbox.toolchain import user_cache

BUSYBOX = Path("/bin/busybox")
_PAUSE_CMD = ["/bin/sleep", "2147483647"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeImages:
    """The OCI archive and the references of the images in it."""

    archive: Path
    pause: str
    busybox: str


def images_cache() -> Path:
    """Where built archives live."""
    return user_cache("images", "SLONKD_IMAGES_CACHE")


def ensure_node_images() -> NodeImages:
    """Return the archive of the pause and busybox images, building it if the cache lacks it."""
    if not BUSYBOX.exists():
        raise HarnessError(f"{BUSYBOX} is missing: install the Debian package busybox-static")
    layer = _busybox_layer()
    tag = hashlib.sha256(layer).hexdigest()[:16]
    pause = f"slonkd.local/pause:{tag}"
    busybox = f"slonkd.local/busybox:{tag}"
    archive = images_cache() / f"node-images-{tag}.tar"
    if not archive.exists():
        archive.parent.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(_oci_archive(layer, {pause: _PAUSE_CMD, busybox: ["/bin/sh"]}))
        tmp.replace(archive)
    return NodeImages(archive=archive, pause=pause, busybox=busybox)


def _applets() -> list[str]:
    out = subprocess.run(
        [str(BUSYBOX), "--list"], capture_output=True, text=True, timeout=10, check=True
    )
    return sorted({a for a in out.stdout.split() if a and "/" not in a and a != "busybox"})


def _busybox_layer() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = mode
            tar.addfile(info)

        for name in ("bin", "dev", "etc", "proc", "sys", "var", "run"):
            add_dir(name)
        add_dir("tmp", 0o1777)
        data = BUSYBOX.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.mode = 0o755
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for applet in _applets():
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
        for name, text in (
            ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n"),
            ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
        ):
            raw = text.encode()
            info = tarfile.TarInfo(name)
            info.mode = 0o644
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"digest": digest, "size": len(data)}


def _oci_archive(layer: bytes, images: dict[str, list[str]]) -> bytes:
    """An OCI image layout (as a tar) holding one manifest per image, all on ``layer``."""
    blobs: dict[str, bytes] = {}
    layer_desc = {"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(blobs, layer)}
    manifests = []
    for ref, cmd in sorted(images.items()):
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": cmd, "Env": ["PATH=/bin"], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
            "history": [{"created_by": "slonkd_sandbox.realnode.images"}],
        }
        config_desc = {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            **_blob(blobs, json.dumps(config, sort_keys=True).encode()),
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_desc,
            "layers": [layer_desc],
        }
        desc = {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            **_blob(blobs, json.dumps(manifest, sort_keys=True).encode()),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "io.containerd.image.name": ref,
                "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
            },
        }
        manifests.append(desc)
    index = {"schemaVersion": 2, "manifests": manifests}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.mode = 0o644
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add("index.json", json.dumps(index, sort_keys=True).encode())
        for digest, data in sorted(blobs.items()):
            add(f"blobs/sha256/{digest.split(':', 1)[1]}", data)
    return out.getvalue()


__all__ = ["NodeImages", "ensure_node_images", "images_cache"]
