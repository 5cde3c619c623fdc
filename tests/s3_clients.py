"""S3 clients for tests/s3.rs, run against the loopback S3 server: makes a bucket, lists keys, and
reads a run's evaluation table the way users do, with DuckDB (httpfs, loaded from the
duckdb-extension-httpfs wheel, no download) and pyarrow's S3 filesystem.

  s3_clients.py bucket ENDPOINT BUCKET
  s3_clients.py keys ENDPOINT BUCKET PREFIX           -> one key per line (relative to PREFIX)
  s3_clients.py read ENDPOINT BUCKET PREFIX           -> JSON: rows and recall sums per client
"""

import glob
import json
import os
import sys
from urllib.parse import urlparse

import boto3

KEY, SECRET, REGION = "test", "test", "us-east-1"


def client(endpoint):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name=REGION,
    )


def keys(endpoint, bucket, prefix):
    out = []
    pages = client(endpoint).get_paginator("list_objects_v2")
    for page in pages.paginate(Bucket=bucket, Prefix=prefix + "/"):
        out.extend(o["Key"][len(prefix) + 1 :] for o in page.get("Contents", []))
    return out


def evaluation_files(endpoint, bucket, prefix):
    body = client(endpoint).get_object(Bucket=bucket, Key=f"{prefix}/evaluate/manifest.json")["Body"]
    manifest = json.loads(body.read())
    return [f"{prefix}/{f['path']}" for f in manifest["files"] if f["table"] == "evaluation"]


def read(endpoint, bucket, prefix):
    files = evaluation_files(endpoint, bucket, prefix)

    import duckdb
    import duckdb_extension_httpfs

    ext = glob.glob(
        os.path.join(os.path.dirname(duckdb_extension_httpfs.__file__), "extensions/*/httpfs.duckdb_extension")
    )[0]
    con = duckdb.connect()
    con.execute(f"LOAD '{ext}'")
    host = urlparse(endpoint).netloc
    con.execute(
        f"CREATE SECRET (TYPE s3, KEY_ID '{KEY}', SECRET '{SECRET}', REGION '{REGION}', "
        f"ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false)"
    )
    urls = ", ".join(f"'s3://{bucket}/{k}'" for k in files)
    duck_rows, duck_recall = con.execute(
        f"SELECT count(*), sum(pool_recall) FROM read_parquet([{urls}])"
    ).fetchone()

    import pyarrow.compute as pc
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    s3 = pafs.S3FileSystem(
        access_key=KEY, secret_key=SECRET, region=REGION, endpoint_override=endpoint,
        scheme=urlparse(endpoint).scheme,
    )
    tables = [pq.read_table(f"{bucket}/{k}", filesystem=s3) for k in files]
    arrow_rows = sum(t.num_rows for t in tables)
    arrow_recall = sum(pc.sum(t["pool_recall"]).as_py() or 0.0 for t in tables)
    return {
        "files": len(files),
        "duckdb_rows": duck_rows,
        "duckdb_pool_recall": duck_recall,
        "pyarrow_rows": arrow_rows,
        "pyarrow_pool_recall": arrow_recall,
    }


def main():
    cmd, endpoint, bucket = sys.argv[1:4]
    if cmd == "bucket":
        client(endpoint).create_bucket(Bucket=bucket)
    elif cmd == "keys":
        print("\n".join(keys(endpoint, bucket, sys.argv[4])))
    elif cmd == "read":
        print(json.dumps(read(endpoint, bucket, sys.argv[4])))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
