"""Alter a stored Workdir object behind the Workdir's back (bit rot, a foreign writer)."""

from __future__ import annotations

from app.compression.workdir import LocalStore, OffloadRecord, Workdir
from tests.support.s3_server import S3Server


def tamper(workdir: Workdir, record: OffloadRecord, s3: S3Server | None, bucket: str = "") -> None:
    """Replace the object's bytes but keep the SHA-256 stored with it."""
    if isinstance(workdir.store, LocalStore):
        (workdir.store.root / record.key).write_text("tampered")
        return
    assert s3 is not None and bucket
    s3.client().put_object(
        Bucket=bucket,
        Key=f"workdir/{record.key}",
        Body=b"tampered",
        Metadata={"sha256": record.sha256},
    )


def bucket_of(settings: dict[str, object]) -> str:
    return str(settings.get("workdir_url", "")).removeprefix("s3://").split("/")[0]
