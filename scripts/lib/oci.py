"""OCI image layouts written without Docker, byte for byte the same for the same inputs.

A `Layer` collects filesystem entries; `write_image` turns layers and an image config into an
OCI image layout tar (oci-layout, index.json, blobs) that `ctr images import`, `docker load`,
`podman load` and `skopeo copy oci-archive:` take. Everything is normalised: entries sorted,
owners numeric, every mtime one given time, gzip without a timestamp, JSON with sorted keys.
Used by scripts/image (the operator's image) and tests/node/build (the node's pause image).
"""
import datetime
import gzip
import hashlib
import io
import json
import os
import tarfile


class Layer:
    """A filesystem layer: entries by path, written sorted with normalised metadata."""

    def __init__(self, mtime):
        self.mtime = mtime
        self.entries = {}  # path -> (TarInfo, bytes or None)

    def add(self, info, data=None):
        """Add an entry; a directory already there is kept, any other duplicate is an error."""
        path = info.name
        if path in self.entries:
            if info.isdir():
                return
            raise SystemExit(f"image: {path} added twice")
        self.entries[path] = (info, data)

    def dir(self, path, mode=0o755, uid=0, gid=0):
        """Add a directory."""
        self.add(self._info(path, tarfile.DIRTYPE, mode, uid, gid))

    def file(self, path, data, mode=0o644, uid=0, gid=0):
        """Add a regular file holding `data`."""
        info = self._info(path, tarfile.REGTYPE, mode, uid, gid)
        info.size = len(data)
        self.add(info, data)

    @staticmethod
    def _info(path, kind, mode, uid, gid):
        info = tarfile.TarInfo(path)
        info.type = kind
        info.mode = mode
        info.uid, info.gid = uid, gid
        return info

    def _parents(self):
        """Every parent directory gets an entry of its own."""
        for path in list(self.entries):
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                parent = "/".join(parts[:i])
                if parent and parent not in self.entries:
                    self.dir(parent)

    def tar(self):
        """The layer as an uncompressed tar."""
        self._parents()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
            for path in sorted(self.entries):
                info, data = self.entries[path]
                info.mtime = self.mtime
                info.uname = info.gname = ""
                t.addfile(info, io.BytesIO(data) if data is not None else None)
        return buf.getvalue()


def _blob(data):
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def _gz(data):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as g:
        g.write(data)
    return buf.getvalue()


def _canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def timestamp(epoch):
    """RFC 3339 UTC time of a Unix time, as image configs write it."""
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def write_image(out, *, name, tag, arch, epoch, layers, config, history, annotations=None):
    """Write the image as an OCI layout tar at `out`: `layers` (Layer objects, base first),
    `config` (the image config's "config" member: User, Entrypoint, ...), one `history` line
    per layer, the manifest's `annotations`. The index names it `name:tag`. Returns what a
    caller prints: the image name, manifest digest, path and sizes."""
    tars = [layer.tar() for layer in layers]
    compressed = [_blob(_gz(t)) for t in tars]
    created = timestamp(epoch)
    image_config = {
        "architecture": arch,
        "os": "linux",
        "created": created,
        "config": config,
        "rootfs": {"type": "layers",
                   "diff_ids": ["sha256:" + hashlib.sha256(t).hexdigest() for t in tars]},
        "history": [{"created": created, "created_by": h} for h in history],
    }
    config_digest, config_bytes = _blob(_canonical(image_config))
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": d, "size": len(b)} for d, b in compressed],
    }
    if annotations:
        manifest["annotations"] = annotations
    manifest_digest, manifest_bytes = _blob(_canonical(manifest))
    image_name = f"{name}:{tag}"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": manifest["mediaType"], "digest": manifest_digest,
            "size": len(manifest_bytes),
            "platform": {"architecture": arch, "os": "linux"},
            # containerd's and Docker's importers read the first; the OCI spec the second.
            "annotations": {"io.containerd.image.name": image_name,
                            "org.opencontainers.image.ref.name": tag},
        }],
    }
    layout = Layer(epoch)
    layout.file("oci-layout", _canonical({"imageLayoutVersion": "1.0.0"}))
    layout.file("index.json", _canonical(index))
    for d, b in [(config_digest, config_bytes), (manifest_digest, manifest_bytes), *compressed]:
        layout.file("blobs/sha256/" + d.split(":", 1)[1], b)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(layout.tar())
    os.replace(tmp, out)
    return {
        "image": image_name,
        "digest": manifest_digest,
        "tar": out,
        "compressedBytes": sum(len(b) for _, b in compressed) + len(config_bytes)
        + len(manifest_bytes),
        "uncompressedBytes": sum(len(t) for t in tars),
    }


def main():
    """`oci.py static BINARY --out TAR --name NAME --tag TAG [--path P] [--user U]`: an image of
    one static binary at /P (its entrypoint), run as U; for images with nothing else in them,
    such as the node's pause image."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("kind", choices=["static"])
    ap.add_argument("binary")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--path", default=None, help="default: the binary's file name")
    ap.add_argument("--user", default="65535:65535")
    ap.add_argument("--arch", default="amd64")
    ap.add_argument("--epoch", type=int, default=0, help="every mtime and the created time")
    args = ap.parse_args()
    path = args.path or os.path.basename(args.binary)
    layer = Layer(args.epoch)
    with open(args.binary, "rb") as f:
        layer.file(path, f.read(), 0o755)
    result = write_image(
        args.out, name=args.name, tag=args.tag, arch=args.arch, epoch=args.epoch,
        layers=[layer], config={"User": args.user, "Entrypoint": ["/" + path]},
        history=[f"oci.py static: /{path}"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
