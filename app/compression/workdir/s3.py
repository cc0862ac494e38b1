"""S3-compatible Workdir backend (AWS S3, MinIO, Ceph...) through obstore's async client.

Why object storage: with several hosts, the worker that offloads a result and the API process
that serves it back are different machines; a shared bucket is what both can reach.

An S3 PUT is atomic (the object appears whole or not at all). The SHA-256 travels with the
object as user metadata (``x-amz-meta-sha256``) and is checked by the facade on every read.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

import obstore
from obstore.store import S3Store as _ObstoreS3

from app.compression.workdir.base import (
    CHUNK_BYTES,
    PutItem,
    PutOutcome,
    StoredObject,
    WorkdirError,
    WorkdirNotFoundError,
)

SHA_ATTRIBUTE = "sha256"
#: PUTs of one batch in flight at once (each is a whole object: the batch costs ~ its slowest).
PUT_CONCURRENCY = 16
#: Where obstore looks for a custom endpoint (MinIO, Ceph...); unset: AWS itself.
_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT")


class S3Store:
    """``s3://bucket/prefix`` through obstore, which reads endpoint, region and credentials from
    the standard ``AWS_*`` variables (or an instance role) itself; ``config`` (obstore keys such
    as ``endpoint``, ``region``) overrides them."""

    def __init__(
        self,
        url: str,
        *,
        config: Mapping[str, str] | None = None,
        timeout_seconds: float = 30.0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        config = dict(config or {})
        endpoint = config.get("endpoint") or next(
            (env[name] for name in _ENDPOINT_VARIABLES if env.get(name)), ""
        )
        timeout = timedelta(seconds=timeout_seconds)
        self._store = _ObstoreS3.from_url(
            url,
            config=cast(Any, config) or None,
            client_options={
                # Explicit client options replace obstore's AWS_ALLOW_HTTP: a plain-http
                # endpoint (MinIO on a LAN, a test server) is what the operator asked for.
                "allow_http": endpoint.startswith("http://"),
                "timeout": timeout,
                "connect_timeout": timedelta(seconds=min(timeout_seconds, 5.0)),
            },
            # Bounded: a broken bucket must surface as an error, not as a 3-minute retry loop.
            retry_config={"max_retries": 2, "retry_timeout": timeout},
        )
        self.description = url + (f" at {endpoint}" if endpoint else "")

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

    async def put_many(self, items: Sequence[PutItem]) -> list[PutOutcome]:
        """Concurrent PUTs (bounded); each object is atomic on its own, so one failed PUT
        leaves only that item unstored."""
        gate = asyncio.Semaphore(PUT_CONCURRENCY)

        async def one(key: str, data: bytes, sha256: str) -> PutOutcome:
            async with gate:
                try:
                    await self.put(key, data, sha256)
                except WorkdirError as exc:
                    return exc
                return None

        return list(await asyncio.gather(*(one(*item) for item in items)))

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


def deprecated_s3_config(
    endpoint_url: str, region: str, access_key_id: str, secret_access_key: str
) -> dict[str, str]:
    """The old ``THREADKEEPER_S3_*`` settings as obstore config keys (set ones only)."""
    pairs = {
        "endpoint": endpoint_url,
        "region": region,
        "access_key_id": access_key_id,
        "secret_access_key": secret_access_key,
    }
    return {key: value for key, value in pairs.items() if value}


def _sha(attributes: Any) -> str | None:
    value = (attributes or {}).get(SHA_ATTRIBUTE)
    return str(value) if value else None


def _short(exc: BaseException) -> str:
    """obstore errors embed full response bodies; the first line is the useful part."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
