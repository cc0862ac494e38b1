"""S3-compatible Workdir backend (AWS S3, MinIO, Ceph...) through obstore's async client.

Why object storage: with several hosts, the worker that offloads a result and the API process
that serves it back are different machines; a shared bucket is what both can reach.

An S3 PUT is atomic (the object appears whole or not at all). The SHA-256 travels with the
object as user metadata (``x-amz-meta-sha256``) and is checked by the facade on every read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import obstore
from obstore.store import S3Store as _ObstoreS3

from app.agents.workdir.base import CHUNK_BYTES, StoredObject, WorkdirError, WorkdirNotFoundError

if TYPE_CHECKING:
    from app.config import Settings

SHA_ATTRIBUTE = "sha256"


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> (bucket, prefix without slashes at either end)."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError("THREADKEEPER_WORKDIR_URL must look like s3://bucket[/prefix]")
    return parts.netloc, parts.path.strip("/")


class S3Store:
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str = "",
        region: str = "",
        access_key_id: str = "",
        secret_access_key: str = "",
        timeout_seconds: float = 30.0,
    ) -> None:
        config: dict[str, Any] = {}
        if endpoint_url:
            config["endpoint"] = endpoint_url
        if region:
            config["region"] = region
        if access_key_id:
            config["access_key_id"] = access_key_id
            config["secret_access_key"] = secret_access_key
        timeout = timedelta(seconds=timeout_seconds)
        self._store = _ObstoreS3(
            bucket,
            prefix=prefix or None,
            config=config,  # type: ignore[arg-type]
            client_options={
                "allow_http": endpoint_url.startswith("http://"),
                "timeout": timeout,
                "connect_timeout": timedelta(seconds=min(timeout_seconds, 5.0)),
            },
            # Bounded: a broken bucket must surface as an error, not as a 3-minute retry loop.
            retry_config={"max_retries": 2, "retry_timeout": timeout},
        )
        self.description = f"s3://{bucket}/{prefix}" + (
            f" at {endpoint_url}" if endpoint_url else ""
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> S3Store:
        bucket, prefix = parse_s3_url(settings.workdir_url)
        return cls(
            bucket,
            prefix,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=settings.s3_secret_access_key,
        )

    async def check(self) -> None:
        """A listing proves the bucket exists and the credentials can read it."""
        try:
            await obstore.list(self._store, prefix="", chunk_size=1).__anext__()
        except StopAsyncIteration:
            return
        except Exception as exc:
            raise WorkdirError(f"workdir bucket unusable ({self.description}): {exc}") from exc

    async def head(self, key: str) -> StoredObject | None:
        try:
            result = await obstore.get_async(self._store, key, options={"head": True})
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise WorkdirError(f"cannot stat {key}: {_short(exc)}") from exc
        return StoredObject(key, result.meta["size"], _sha(result.attributes))

    async def put(self, key: str, data: bytes, sha256: str) -> None:
        try:
            await obstore.put_async(
                self._store,
                key,
                data,
                attributes={"Content-Type": "text/plain; charset=utf-8", SHA_ATTRIBUTE: sha256},
            )
        except Exception as exc:
            raise WorkdirError(f"cannot write {key}: {_short(exc)}") from exc

    async def open(self, key: str) -> tuple[StoredObject, AsyncIterator[bytes]]:
        try:
            result = await obstore.get_async(self._store, key)
        except FileNotFoundError as exc:
            raise WorkdirNotFoundError(f"no such workdir file: {key.partition('/')[2]}") from exc
        except Exception as exc:
            raise WorkdirError(f"cannot read {key}: {_short(exc)}") from exc
        info = StoredObject(key, result.meta["size"], _sha(result.attributes))

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in result.stream(min_chunk_size=CHUNK_BYTES):
                    yield bytes(chunk)
            except Exception as exc:
                raise WorkdirError(f"cannot read {key}: {_short(exc)}") from exc

        return info, chunks()

    async def list_objects(self, prefix: str) -> list[StoredObject]:
        out: list[StoredObject] = []
        try:
            async for batch in obstore.list(self._store, prefix=prefix):
                out.extend(StoredObject(m["path"], m["size"], None) for m in batch)
        except Exception as exc:
            raise WorkdirError(f"cannot list {prefix}: {_short(exc)}") from exc
        return out

    async def delete_prefix(self, prefix: str) -> None:
        keys = [o.key for o in await self.list_objects(prefix)]
        try:
            if keys:
                await obstore.delete_async(self._store, keys)
        except Exception as exc:
            raise WorkdirError(f"cannot delete {prefix}: {_short(exc)}") from exc

    async def close(self) -> None:
        return None


def _sha(attributes: Any) -> str | None:
    value = (attributes or {}).get(SHA_ATTRIBUTE)
    return str(value) if value else None


def _short(exc: BaseException) -> str:
    """obstore errors embed full response bodies; the first line is the useful part."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
