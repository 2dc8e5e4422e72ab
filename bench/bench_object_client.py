"""Which client badput's object stores use: obstore or fsspec's s3fs, measured on what a
reader of a store does most (list a job's part objects, fetch many small ones).

    python bench/bench_object_client.py [--objects 1000] [--size 2048]

Starts moto's S3 server on 127.0.0.1, puts ``--objects`` objects of ``--size`` bytes, then
for each client: one listing of them all, and reading every one (one after another, and
64 at a time: obstore's async API, s3fs's ``cat`` of many paths). Prints objects/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import obstore
import s3fs
from obstore.store import S3Store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _s3 import MotoServer


def _timed(fn):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def bench_obstore(url: str, n: int) -> dict[str, float]:
    store = S3Store("bench", client_options={"allow_http": True})
    dt_list, listed = _timed(lambda: [m for batch in obstore.list(store, "p/") for m in batch])
    assert len(listed) == n, len(listed)
    paths = [m["path"] for m in listed]
    dt_seq, _ = _timed(lambda: [bytes(obstore.get(store, p).bytes()) for p in paths])

    async def many() -> list[bytes]:
        sem = asyncio.Semaphore(64)

        async def one(p: str) -> bytes:
            async with sem:
                got = await obstore.get_async(store, p)
                return bytes(await got.bytes_async())

        return await asyncio.gather(*(one(p) for p in paths))

    dt_par, _ = _timed(lambda: asyncio.run(many()))
    return {"list": n / dt_list, "read_seq": n / dt_seq, "read_64": n / dt_par}


def bench_s3fs(url: str, n: int) -> dict[str, float]:
    fs = s3fs.S3FileSystem(endpoint_url=url, key="testing", secret="testing")
    dt_list, listed = _timed(lambda: fs.find("bench/p/"))
    assert len(listed) == n, len(listed)
    fs.invalidate_cache()
    dt_seq, _ = _timed(lambda: [fs.cat_file(p) for p in listed])
    dt_par, _ = _timed(lambda: fs.cat(listed, batch_size=64))
    return {"list": n / dt_list, "read_seq": n / dt_seq, "read_64": n / dt_par}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--size", type=int, default=2048)
    args = parser.parse_args()
    server = MotoServer().start()
    try:
        os.environ.update(
            AWS_ENDPOINT_URL=server.url,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
        )
        server.make_bucket("bench")
        store = S3Store("bench", client_options={"allow_http": True})
        body = b"x" * (args.size - 1) + b"\n"
        for i in range(args.objects):
            obstore.put(store, f"p/job/0/h-0-1.jsonl.part-{i:06d}", body)
        for name, fn in (("obstore", bench_obstore), ("s3fs", bench_s3fs)):
            rates = fn(server.url, args.objects)
            print(
                f"{name:8s} list {rates['list']:9,.0f} obj/s   read one by one "
                f"{rates['read_seq']:7,.0f} obj/s   "
                f"read 64 at a time {rates['read_64']:7,.0f} obj/s"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
