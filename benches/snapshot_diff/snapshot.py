"""Writes snapshot VERSION of N customers to the Delta table at PATH (overwriting it) and
prints its row count, the sum of its balances and its rows in city 'Moved'. Snapshot 1 holds keys 0..N-1; snapshot 2 changes P % of them:
half updated (balance and city), a quarter deleted, and a quarter of new keys added."""
import sys

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake

path, n, pct, version = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
ids = pa.array(range(n), pa.int64())
cities = pa.array(["Oslo", "Lima", "Pune", "Kyiv", "Quito"] * (n // 5 + 1))[:n]
table = pa.table({
    "customer_id": ids,
    "name": pc.binary_join_element_wise("customer ", pc.cast(ids, pa.string()), ""),
    "city": cities,
    "balance": pc.multiply(ids, 3),
})
if version == 2:
    changed = int(n * pct / 100)
    step = max(n // changed, 1) if changed else n + 1
    idx = pa.array(range(0, n, step), pa.int64())[:changed]
    updated, deleted = idx[: changed // 2], idx[changed // 2 : changed // 2 + changed // 4]
    upd = pc.is_in(table["customer_id"], updated)
    table = table.set_column(3, "balance", pc.if_else(upd, pc.add(table["balance"], 1), table["balance"]))
    table = table.set_column(2, "city", pc.if_else(upd, "Moved", table["city"]))
    table = table.filter(pc.invert(pc.is_in(table["customer_id"], deleted)))
    new = pa.array(range(n, n + changed // 4), pa.int64())
    table = pa.concat_tables([table, pa.table({
        "customer_id": new,
        "name": pc.binary_join_element_wise("customer ", pc.cast(new, pa.string()), ""),
        "city": pa.array(["New"] * len(new)),
        "balance": new,
    })])
write_deltalake(path, table, mode="overwrite")
moved = pc.sum(pc.equal(table["city"], "Moved")).as_py() or 0
print(table.num_rows, pc.sum(table["balance"]).as_py(), moved)
