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


def count(members: list[tuple[str, str]]) -> tuple[int, int]:
    """Files and bytes below the members, links followed (what the archive will hold)."""
    files = size = 0
    for path, _ in members:
        if os.path.isdir(path):
            for root, _dirs, names in os.walk(path, followlinks=True):
                for name in names:
                    files += 1
                    size += os.path.getsize(os.path.join(root, name))
        elif os.path.exists(path):
            files += 1
            size += os.path.getsize(path)
    return files, size


def pack(upload: SourceUpload, target: str) -> None:
    """Writes the gzipped tar of `upload`'s members to `target` (blocking)."""
    with tarfile.open(target, mode="w:gz", dereference=True) as tar:
        for path, name in upload.members():
            tar.add(path, arcname=name)
