"""Reads every committed artifact of an ri-batch output directory with pyarrow and DuckDB, checks
row counts against the manifests (also when a table's directory is opened as a pyarrow dataset, as
pandas and polars users do: no partition file may be hidden from it), then runs a query in DuckDB
over the same files and compares it with `ri-batch sql --format json` output.

usage: clients.py OUTPUT_DIR QUERY RI_BATCH_JSON
"""
import glob
import json
import math
import os
import sys

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.ipc
import pyarrow.parquet as pq

out_dir, query, ours = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
tables = {}
for manifest in sorted(glob.glob(os.path.join(out_dir, "*", "manifest.json"))):
    m = json.load(open(manifest))
    for f in m["files"]:
        tables.setdefault(f["table"], []).append((os.path.join(out_dir, f["path"]), f["rows"]))

con = duckdb.connect()
for table, files in sorted(tables.items()):
    paths = [p for p, _ in files]
    want = sum(n for _, n in files)
    if all(p.endswith(".arrow") for p in paths):
        # Arrow IPC tables (the memory-mapped BM25 index): pyarrow reads them, DuckDB scans the
        # Arrow data pyarrow hands it.
        data = pa.concat_tables([pa.ipc.open_file(p).read_all() for p in paths])
        got_arrow = data.num_rows
        con.register(table, data)
        got_duck = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
    else:
        got_arrow = sum(pq.read_table(p).num_rows for p in paths)
        # Directory discovery skips files named `_…` or `.…` (hidden, metadata). A table's files
        # lie in one directory per stage that writes it (`errors`: every stage).
        folders = {os.path.dirname(p) for p in paths}
        got_dir = sum(ds.dataset(d, format="parquet").count_rows() for d in folders)
        assert got_dir == want, (table, "read as a directory", want, got_dir)
        got_duck = con.execute("SELECT count(*) FROM read_parquet(?)", [paths]).fetchone()[0]
        listed = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
        con.execute(f'CREATE VIEW "{table}" AS SELECT * FROM read_parquet([{listed}])')
    assert got_arrow == want == got_duck, (table, want, got_arrow, got_duck)
    print(f"table {table} rows={want} files={len(paths)} (pyarrow and duckdb agree)")

cur = con.execute(query)
cols = [d[0] for d in cur.description]
theirs = [dict(zip(cols, row)) for row in cur.fetchall()]


def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is None and b is None
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
    return a == b


assert len(theirs) == len(ours), (len(theirs), len(ours))
for x, y in zip(theirs, ours):
    for c in cols:
        assert same(x[c], y.get(c)), (c, x, y)
print(f"query results equal ({len(ours)} rows)")
