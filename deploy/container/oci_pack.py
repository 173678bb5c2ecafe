#!/usr/bin/python3
"""Packs a root filesystem into an OCI image layout (image-spec 1.0): one gzip layer, a config
with the runtime settings from a JSON file, a manifest and index.json naming the tag.

Entries are sorted, times clamped to SOURCE_DATE_EPOCH (default 0) and owners numeric. Standard
library only (Debian's python3).

  oci_pack.py --rootfs DIR --out LAYOUT --tag NAME:TAG --config image-config.json
"""
import argparse
import gzip
import hashlib
import json
import os
import shutil
import tarfile
from pathlib import Path


class HashingWriter:
    """A file object that hashes and counts what passes through it."""

    def __init__(self, target):
        self.target = target
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data):
        self.digest.update(data)
        self.size += len(data)
        return self.target.write(data)

    def flush(self):
        self.target.flush()


def add_tree(tar, rootfs, mtime):
    """Adds rootfs's contents (not itself) in sorted order with clamped times."""
    for directory, dirnames, filenames in os.walk(rootfs):
        dirnames.sort()
        names = sorted(dirnames + filenames)
        for name in names:
            path = os.path.join(directory, name)
            info = tar.gettarinfo(path, arcname=os.path.relpath(path, rootfs))
            info.mtime = min(info.mtime, mtime)
            info.uname = info.gname = ""
            if info.isfile():
                with open(path, "rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)
        # os.walk does not descend into symlinked directories; sorted dirnames drive the order.


def write_blob(blobs, data):
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rootfs", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tag", default="opentunnel:dev")
    parser.add_argument("--config", required=True, help="JSON: the image config's 'config' part")
    args = parser.parse_args()

    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    # The layer: tar -> (hash for diff_id) -> gzip -> (hash for the digest) -> a temp blob.
    layer_tmp = blobs / "layer.tmp"
    with open(layer_tmp, "wb") as raw:
        compressed = HashingWriter(raw)
        with gzip.GzipFile(fileobj=compressed, mode="wb", compresslevel=1, mtime=0) as gz:
            uncompressed = HashingWriter(gz)
            with tarfile.open(fileobj=uncompressed, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                add_tree(tar, args.rootfs, mtime)
    layer_digest = compressed.digest.hexdigest()
    layer_tmp.rename(blobs / layer_digest)
    diff_id = f"sha256:{uncompressed.digest.hexdigest()}"

    runtime = json.loads(Path(args.config).read_text())
    created = "1970-01-01T00:00:00Z" if mtime == 0 else None
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "deploy/container/build-image.sh"}],
    }
    if created:
        config["created"] = created
    config_digest, config_size = write_blob(
        blobs, json.dumps(config, indent=2, sort_keys=True).encode())

    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": f"sha256:{layer_digest}", "size": compressed.size}],
    }
    manifest_digest, manifest_size = write_blob(
        blobs, json.dumps(manifest, indent=2, sort_keys=True).encode())

    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": manifest_digest, "size": manifest_size,
                       "platform": {"architecture": "amd64", "os": "linux"},
                       "annotations": {"org.opencontainers.image.ref.name": args.tag}}],
    }
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    (out / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}) + "\n")
    print(f"oci_pack: {args.tag} manifest {manifest_digest} layer sha256:{layer_digest} "
          f"({compressed.size} bytes gzip, {uncompressed.size} tar)")


if __name__ == "__main__":
    main()
