#!/usr/bin/env python3
"""Event files and expected row counts for the cost-follows-change benchmark (issue 18).

    python gen_cases.py --kit DIR --n N --a M --b M --c M --d M --d-batches K --seed S --out DIR

Uses the CDC-apply kit's generator (`gen.py` in --kit) so the table and the change mix are
the kit's: the same keys, values, change mix (updates, deletes, inserts of new keys,
out-of-order chains, 5% re-deliveries) and sequence numbering. Writes into --out:

    load_scd1.parquet   the kit's target (N rows) as insert events, seq = the row's version start
    load_scd2.parquet   the kit's history (~1.1 N versions) as events, so SCD type 2 rebuilds it
    a.parquet           --a events on uniformly random existing keys (plus 20% new keys)
    b.parquet           --b events, the same mix
    c.parquet           --c events on the newest 1% of keys (the highest customer_ids)
    d_00.parquet ...    --d-batches batches of --d events, applied one after another
    cont.parquet        one batch of --d events for the continuous-mode latency
    expected.json       rows (and open SCD2 versions) the published table must hold after each
                        case, computed from the events, not from any engine

Every event's seq is above every loaded seq (the kit's batches start at 1e9 + 1; loaded
versions are below 1e9), and batch i of (d) is shifted by i * SEQ_STRIDE so that later
batches are newer than earlier ones.
"""
import argparse
import importlib.util
import json
import os
import time

import polars as pl

SEQ_STRIDE = 100_000_000   # seq (and updated_at, in ms) shift between batches of (d)


def load_kit(kit_dir):
    spec = importlib.util.spec_from_file_location("kit_gen", os.path.join(kit_dir, "gen.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_events(gen, n, seed):
    """The kit's target and history, as the change events that build them from nothing."""
    target = gen.build_target(n, seed)
    history = gen.build_history(target, seed)   # sorted by (customer_id, __START_AT)
    del target
    # SCD2: one event per version, at its start; the next version's event closes it, so
    # the applied table is the kit's history, closed versions included.
    scd2 = history.with_columns(
        op=pl.when(pl.col("customer_id").is_first_distinct()).then(pl.lit("I")).otherwise(pl.lit("U")),
        seq=pl.col("__START_AT"),
    )
    # SCD1: the current versions only (the kit's target rows), inserted.
    scd1 = scd2.filter(pl.col("__END_AT").is_null()).with_columns(op=pl.lit("I"))
    return scd1, scd2


def distinct_events(changes):
    """Re-deliveries are the same event: one row per (customer_id, seq)."""
    return changes.unique(subset=["customer_id", "seq"], keep="first")


def scd1_last(changes):
    """Whether each touched key is alive after the batch: its highest-seq event is no D."""
    return (distinct_events(changes).sort("seq")
            .group_by("customer_id").agg(alive=pl.col("op").last() != "D"))


class Expect:
    """Row counts of the published table, from the events alone.

    SCD1: the live keys. The loaded table holds keys 1..n; `overrides` records the keys
    whose liveness a batch changed (key -> alive), so later batches build on earlier ones.
    SCD2: every distinct I/U event opens one version and nothing removes a version (every
    event is newer than the stored state and changes `updated_at`, so none is a no-op);
    the open versions are the live keys.
    """

    def __init__(self, n, scd2_loaded):
        self.n = n
        self.overrides = pl.DataFrame(schema={"customer_id": pl.Int64, "alive": pl.Boolean})
        self.scd2_rows = scd2_loaded

    def copy(self):
        other = Expect(self.n, self.scd2_rows)
        other.overrides = self.overrides.clone()
        return other

    def apply(self, changes):
        last = scd1_last(changes)
        self.overrides = pl.concat([self.overrides.join(last, on="customer_id", how="anti"), last])
        d = distinct_events(changes)
        self.scd2_rows += d.filter(pl.col("op") != "D").height
        return self.counts()

    def live(self):
        o = self.overrides
        loaded = pl.col("customer_id") <= self.n
        lost = o.filter(loaded & ~pl.col("alive")).height
        gained = o.filter(~loaded & pl.col("alive")).height
        return self.n - lost + gained

    def counts(self):
        live = self.live()
        return {"scd1": {"rows": live, "open": live}, "scd2": {"rows": self.scd2_rows, "open": live}}


def shift(changes, n, key_offset, seq_offset):
    """Moves a batch's new keys (ids above n) and its seqs out of the way of other
    batches'; updated_at moves with seq, so it stays distinct from every earlier version's."""
    key = pl.col("customer_id")
    return changes.with_columns(
        customer_id=pl.when(key > n).then(key + key_offset).otherwise(key),
        seq=pl.col("seq") + seq_offset,
        updated_at=pl.col("updated_at") + pl.duration(milliseconds=seq_offset),
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kit", required=True, help="the CDC-apply kit's folder (holds gen.py)")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--a", type=int, required=True)
    ap.add_argument("--b", type=int, required=True)
    ap.add_argument("--c", type=int, required=True)
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--d-batches", type=int, required=True)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t0 = time.perf_counter()
    gen = load_kit(a.kit)
    os.makedirs(a.out, exist_ok=True)
    n = a.n

    def write(df, name):
        gen.write_parquet(df, gen.CHANGES_SCHEMA, os.path.join(a.out, name))

    scd1_load, scd2_load = load_events(gen, n, a.seed)
    write(scd1_load, "load_scd1.parquet")
    write(scd2_load, "load_scd2.parquet")
    loaded = Expect(n, scd2_load.height)
    assert scd1_load.height == n
    # The kit's batch seqs start above SEQ_BASE; the loaded versions must all be older.
    assert scd2_load.get_column("seq").max() < gen.SEQ_BASE
    del scd1_load, scd2_load
    expected = {"load": loaded.counts()}
    events = {"load": {"scd1": n, "scd2": loaded.scd2_rows}}

    # (a), (b): the kit's batch, keys uniform over the table (distinct seeds: distinct keys).
    for case, m, seed in (("a", a.a, a.seed), ("b", a.b, a.seed + 1)):
        changes, stats = gen.build_changes(n, m, seed)
        write(changes, f"{case}.parquet")
        expected[case] = loaded.copy().apply(changes)
        # The kit's own expected count (README, "meta.json") must agree with ours.
        kit_rows = n - stats["keys_existing_deleted"] + stats["keys_new_surviving"]
        assert expected[case]["scd1"]["rows"] == kit_rows, (case, expected[case], kit_rows)
        events[case] = m

    # (c): the kit's batch over a table of n/100 keys, moved onto the newest 1% (keys
    # n - n/100 + 1 .. n); its new keys land just above n, as the kit's do.
    newest = n // 100
    if a.c > newest:
        raise SystemExit(f"--c {a.c}: more events than the newest 1% of --n {n} has keys ({newest})")
    changes, _ = gen.build_changes(newest, a.c, a.seed + 2)
    changes = changes.with_columns(customer_id=pl.col("customer_id") + (n - newest))
    touched_old = changes.filter(pl.col("customer_id") <= n).get_column("customer_id")
    assert touched_old.min() > n - newest, "(c) touched a key outside the newest 1%"
    write(changes, "c.parquet")
    expected["c"] = loaded.copy().apply(changes)
    events["c"] = a.c

    # (d): batches applied one after another. Batch i's new keys move up by i * d (a batch
    # has fewer than d new keys), and its seqs by i * SEQ_STRIDE.
    state = loaded.copy()
    expected["d"] = []
    for i in range(a.d_batches):
        changes, stats = gen.build_changes(n, a.d, a.seed + 10 + i)
        assert stats["events_distinct"] < SEQ_STRIDE
        changes = shift(changes, n, i * a.d, i * SEQ_STRIDE)
        write(changes, f"d_{i:02d}.parquet")
        expected["d"].append(state.apply(changes))
    events["d"] = a.d

    # Continuous mode: one batch of (d)'s size on the loaded table.
    changes, _ = gen.build_changes(n, a.d, a.seed + 100)
    write(changes, "cont.parquet")
    expected["cont"] = loaded.copy().apply(changes)
    events["cont"] = a.d

    with open(os.path.join(a.out, "expected.json"), "w") as f:
        json.dump({"n": n, "seed": a.seed, "d_batches": a.d_batches, "events": events,
                   "expected": expected}, f, indent=2)
    print(f"generated in {time.perf_counter() - t0:.1f} s -> {a.out}")


if __name__ == "__main__":
    main()
