"""A real S3 HTTP server on loopback (moto's ThreadedMotoServer), for Workdir tests.

Why: the S3 backend must be exercised through its real client over HTTP (signing, metadata
headers, streaming, error mapping), not against a mock object. One server per test session; each
test gets its own bucket.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def new_bucket(self) -> str:
        name = f"tk-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name)
        return name

    def settings(self, bucket: str, prefix: str = "workdir") -> dict[str, Any]:
        """Settings overrides that point the app's Workdir at ``bucket`` (the endpoint and
        credentials come from ``aws_env``, as in a deployment)."""
        return {"workdir_url": f"s3://{bucket}/{prefix}"}

    def aws_env(self) -> dict[str, str]:
        """The standard variables obstore reads: this server and its credentials."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        }

    def legacy_settings(self, bucket: str, prefix: str = "workdir") -> dict[str, Any]:
        """The same through the deprecated ``THREADKEEPER_S3_*`` settings (one more release)."""
        return {
            "workdir_url": f"s3://{bucket}/{prefix}",
            "s3_endpoint_url": self.endpoint_url,
            "s3_region": REGION,
            "s3_access_key_id": ACCESS_KEY,
            "s3_secret_access_key": SECRET_KEY,
        }

    def env(self, bucket: str, prefix: str = "workdir") -> dict[str, str]:
        """The same, as environment variables for a child process."""
        return {"THREADKEEPER_WORKDIR_URL": f"s3://{bucket}/{prefix}", **self.aws_env()}


def run_s3_server() -> Iterator[S3Server]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(f"http://{host}:{port}")
    finally:
        server.stop()
