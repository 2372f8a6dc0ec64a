"""The code a framework-mode SageMaker job runs: the source directory (and dependencies) as
`sourcedir.tar.gz` in S3, packed as the SageMaker Python SDK packs it (fw_utils
`tar_and_upload_dir`): every entry of the directory at the archive's root, each dependency
under its own base name, symbolic links followed, gzip-compressed; no ignore file applies.

`SourceUpload` is what a request needs to know of it (where it goes, with which S3 arguments);
`pack` writes the archive (blocking: run it in a thread). Nothing here talks to AWS.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass, field, replace

ARCHIVE = "sourcedir.tar.gz"


@dataclass(frozen=True)
class SourceUpload:
    """`source_dir` (a local directory) and `dependencies` (local paths), packed to
    s3://bucket/key with the PutObject arguments `extra` (ServerSideEncryption, SSEKMSKeyId,
    ExpectedBucketOwner). `default_bucket`: the bucket is the SDK's default one
    (sagemaker-<region>-<account>), created when it is missing."""

    source_dir: str
    bucket: str
    key: str
    script: str = ""  # the entry point, relative to source_dir
    dependencies: tuple[str, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)
    default_bucket: bool = False

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def with_text(self, old: str, new: str) -> SourceUpload:
        """A copy with `old` replaced by `new` in the bucket, key and arguments."""
        return replace(
            self,
            bucket=self.bucket.replace(old, new),
            key=self.key.replace(old, new),
            extra={k: v.replace(old, new) for k, v in self.extra.items()},
        )

    def missing_script(self) -> str:
        """Why the script cannot run from the source directory ("" when it can): the SDK
        refuses to submit then. A dry run only says so (TorchX's dry run does not look)."""
        if not self.script or os.path.isfile(os.path.join(self.source_dir, self.script)):
            return ""
        return f"no file named {self.script!r} in the source directory {self.source_dir}"

    def describe(self) -> str:
        """One line for a dry run: what would be packed and where it would go."""
        files, size = count(self.members())
        deps = "".join(f" + {d}" for d in self.dependencies)
        line = f"would upload {self.source_dir}{deps} ({files} file(s), {size} B) to {self.uri}"
        if why := self.missing_script():
            line += f" ({why}: a run is refused)"
        return line

    def members(self) -> list[tuple[str, str]]:
        """(path, name in the archive) of each top-level entry, in the order they are packed."""
        names = sorted(os.listdir(self.source_dir))
        out = [(os.path.join(self.source_dir, n), n) for n in names]
        out += [(d, os.path.basename(os.path.normpath(d))) for d in self.dependencies]
        return out


class LinkCycle(ValueError):
    """A directory link that leads back into its own ancestors: packing would never end."""


def count(members: list[tuple[str, str]]) -> tuple[int, int]:
    """Files and bytes below the members, links followed (what the archive will hold).
    Raises LinkCycle for a directory reached again through a link below itself; an entry
    that cannot be read counts as 0 bytes (packing it fails and says so)."""
    files = size = 0
    for path, _ in members:
        if not os.path.isdir(path):
            files += 1
            size += _size(path)
            continue
        # (directory, the real paths of it and its ancestors): a bounded walk, links followed
        stack = [(path, frozenset({os.path.realpath(path)}))]
        while stack:
            directory, above = stack.pop()
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir():  # follows links
                    real = os.path.realpath(entry.path)
                    if real in above:
                        raise LinkCycle(f"{entry.path} links back to {real}")
                    stack.append((entry.path, above | {real}))
                else:
                    files += 1
                    size += _size(entry.path)
    return files, size


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def pack(upload: SourceUpload, target: str) -> None:
    """Writes the gzipped tar of `upload`'s members to `target` (blocking). Raises LinkCycle
    (before writing) for a link cycle, OSError for what cannot be read."""
    count(upload.members())
    with tarfile.open(target, mode="w:gz", dereference=True) as tar:
        for path, name in upload.members():
            tar.add(path, arcname=name)
