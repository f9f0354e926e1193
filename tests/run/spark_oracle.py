"""Writes the expected tables of stateful streaming run cases from Apache Spark.

    python3 tests/run/spark_oracle.py tests/run/stream_tumbling [more cases]

Run it with the pyspark of `.ci/spark` (pyspark==4.3.0, local[2]). For each case it
runs the case's flows.sql in Spark Structured Streaming, step by step as the golden
runner runs cdcflow (tests/e2e/run_cases.rs): before step n the files of
`steps/<n>/files/` land, then every streaming table's query runs one
`Trigger.AvailableNow` trigger (one `cdcflow run`), appending to a Parquet sink, and each
materialized view is computed over the tables. The tables after the step are written
to `steps/<n>/expect/<table>.csv` as `cdcflow query --format csv` prints them. Other
files under `expect/` (late rows, hand-written) are left alone.

What it reads of flows.sql: `CREATE [OR REFRESH] STREAMING TABLE t AS <query>;`,
`CREATE [OR REFRESH] MATERIALIZED VIEW m AS <query>;`, a streaming table declared alone
(`CREATE STREAMING TABLE t;`) with one `CREATE FLOW f AS INSERT INTO t [BY NAME]
<query>;` (run as t's query), and `STREAM(t)` of an earlier streaming table (a stream
over the rows its sink has), where each
`read_files('<folder>', format => 'json', schema => '<ddl>')` becomes a view of
`spark.readStream.schema(<ddl>).json(<folder>)` (a plain `read_files`, `spark.read`).
A streaming table's `SELECT DISTINCT ON (keys) cols FROM …` (cdcflow's deduplication
within the watermark; Spark has no SQL for it) runs as `SELECT * FROM …` then
`dropDuplicatesWithinWatermark(keys)` and `selectExpr(cols)` (plain column lists).
"""

import datetime
import decimal
import os
import re
import shutil
import sys
import tempfile

from pyspark.sql import SparkSession

READ_FILES = re.compile(
    r"(STREAM\s+)?read_files\(\s*'([^']+)'\s*,\s*format\s*=>\s*'json'\s*,\s*schema\s*=>\s*'([^']+)'\s*\)",
    re.IGNORECASE,
)
DISTINCT_ON = re.compile(
    r"^\s*SELECT\s+DISTINCT\s+ON\s*\(([^)]*)\)\s+(.*?)\s+FROM\s+(.*)$",
    re.IGNORECASE | re.DOTALL,
)
DECLARED = re.compile(
    r"^\s*CREATE\s+(?:OR\s+REFRESH\s+)?STREAMING\s+TABLE\s+(\w+)\s*$", re.IGNORECASE
)
FLOW = re.compile(
    r"^\s*CREATE\s+FLOW\s+\w+\s+AS\s+INSERT\s+INTO\s+(\w+)\s+(?:BY\s+NAME\s+)?(.*)$",
    re.IGNORECASE | re.DOTALL,
)
STREAM_OF = re.compile(r"STREAM\s*\(\s*(\w+)\s*\)", re.IGNORECASE)
DATASET = re.compile(
    r"^\s*CREATE\s+(?:OR\s+REFRESH\s+)?(STREAMING\s+TABLE|MATERIALIZED\s+VIEW)\s+(\w+)\s+AS\s+(.*)$",
    re.IGNORECASE | re.DOTALL,
)


def statements(text):
    text = "\n".join(l for l in text.splitlines() if not l.strip().startswith("--"))
    return [s.strip() for s in text.split(";") if s.strip()]


def cell(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, datetime.datetime):
        v = v.astimezone(datetime.timezone.utc) if v.tzinfo else v
        text = v.strftime("%Y-%m-%dT%H:%M:%S")
        if v.microsecond:
            text += (".%06d" % v.microsecond).rstrip("0")
        return text + "Z"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    text = str(v)
    if any(c in text for c in ',"\n'):
        text = '"' + text.replace('"', '""') + '"'
    return text


def write_csv(path, df_rows, columns):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines = [",".join(columns)]
    lines += sorted(",".join(cell(r[c]) for c in columns) for r in df_rows)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def streaming_query(spark, query):
    m = DISTINCT_ON.match(query)
    if not m:
        return spark.sql(query)
    keys = [k.strip() for k in m.group(1).split(",")]
    columns = [c.strip() for c in m.group(2).split(",")]
    return (
        spark.sql(f"SELECT * FROM {m.group(3)}")
        .dropDuplicatesWithinWatermark(keys)
        .selectExpr(*columns)
    )


def run_case(spark, case):
    work = tempfile.mkdtemp(prefix="oracle-")
    try:
        defs = []
        sources = {}
        streaming_tables = set()
        for stmt in statements(open(os.path.join(case, "flows.sql")).read()):
            if DECLARED.match(stmt):
                continue
            m = DATASET.match(stmt)
            flow = FLOW.match(stmt)
            if m:
                kind, name, query = m.group(1).upper().split()[0], m.group(2), m.group(3)
            elif flow:
                kind, name, query = "STREAMING", flow.group(1), flow.group(2)
            else:
                raise SystemExit(f"{case}: not a statement the oracle reads: {stmt[:60]}")

            def source(mm):
                streaming, folder, schema = bool(mm.group(1)), mm.group(2), mm.group(3)
                view = f"src_{len(sources)}"
                sources[view] = (streaming, os.path.join(work, folder), schema)
                return f"STREAM({view})" if streaming else view

            query = READ_FILES.sub(source, query)
            # An earlier streaming table read as a stream: its sink's rows, as a stream.
            query = STREAM_OF.sub(
                lambda mm: f"STREAM(stream_{mm.group(1)})"
                if mm.group(1) in streaming_tables
                else mm.group(0),
                query,
            )
            if kind == "STREAMING":
                streaming_tables.add(name)
            defs.append((kind, name, query))
        steps = sorted(
            (d for d in os.listdir(os.path.join(case, "steps"))),
            key=lambda s: int(s) if s.isdigit() else 1 << 30,
        )
        for view, (streaming, folder, schema) in sources.items():
            os.makedirs(folder, exist_ok=True)
        for step in steps:
            step_dir = os.path.join(case, "steps", step)
            files = os.path.join(step_dir, "files")
            if os.path.isdir(files):
                shutil.copytree(files, work, dirs_exist_ok=True)
            for view, (streaming, folder, schema) in sources.items():
                reader = spark.readStream if streaming else spark.read
                reader.schema(schema).json(folder).createOrReplaceTempView(view)
            for kind, name, query in defs:
                out = os.path.join(work, "_out", name)
                if kind == "STREAMING":
                    streaming = streaming_query(spark, query)
                    (
                        streaming
                        .writeStream.format("parquet")
                        .option("path", out)
                        .option("checkpointLocation", os.path.join(work, "_cp", name))
                        .outputMode("append")
                        .trigger(availableNow=True)
                        .start()
                        .awaitTermination()
                    )
                    df = spark.read.parquet(out)
                    spark.readStream.schema(streaming.schema).parquet(out).createOrReplaceTempView(
                        f"stream_{name}"
                    )
                else:
                    df = spark.sql(query)
                df.createOrReplaceTempView(name)
                rows = df.collect()
                write_csv(os.path.join(step_dir, "expect", f"{name}.csv"), rows, df.columns)
                print(f"{case} step {step}: {name}: {len(rows)} row(s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    for case in sys.argv[1:]:
        run_case(spark, case.rstrip("/"))


if __name__ == "__main__":
    main()
