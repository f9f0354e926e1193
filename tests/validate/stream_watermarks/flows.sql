-- Accepted: windows over the watermarked event time, DISTINCT, the plain event time as
-- a key, a computed event time named in the clause, the alias with or without AS.
CREATE OR REFRESH STREAMING TABLE events
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'k STRING, ts TIMESTAMP, ts_text STRING, n INT, v BIGINT');

CREATE OR REFRESH STREAMING TABLE per_minute AS
SELECT k, window.start AS window_start, count(*) AS c, avg(v) AS mean
FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 10 SECONDS AS e
GROUP BY k, window(ts, '1 minute');

CREATE OR REFRESH STREAMING TABLE sliding AS
SELECT window, sum(v) AS total
FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL '1' MINUTE e
GROUP BY window(ts, '10 minutes', '5 minutes');

CREATE OR REFRESH STREAMING TABLE unique_events AS
SELECT DISTINCT k, ts FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 1 HOUR;

CREATE OR REFRESH STREAMING TABLE per_instant AS
SELECT k, ts, max(v) AS most FROM STREAM events WATERMARK ts DELAY OF INTERVAL 5 MINUTES GROUP BY k, ts;

CREATE OR REFRESH STREAMING TABLE parsed AS
SELECT window_time(window(t, '1 hour')) AS at, count(*) AS c
FROM STREAM(events) WATERMARK to_timestamp(ts_text) AS t DELAY OF INTERVAL 1 HOUR r
GROUP BY window(t, '1 hour');

-- Refused.
CREATE OR REFRESH STREAMING TABLE not_timestamp AS
SELECT k, n, count(*) AS c FROM STREAM(events) WATERMARK n DELAY OF INTERVAL 1 MINUTE e GROUP BY k, n;

CREATE OR REFRESH STREAMING TABLE unnamed AS
SELECT k FROM STREAM(events) WATERMARK to_timestamp(ts_text) DELAY OF INTERVAL 1 MINUTE e;

CREATE OR REFRESH STREAMING TABLE negative AS
SELECT k FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL -1 MINUTE e;

CREATE OR REFRESH STREAMING TABLE no_such_column AS
SELECT k FROM STREAM(events) WATERMARK event_time DELAY OF INTERVAL 1 MINUTE e;

CREATE OR REFRESH STREAMING TABLE not_on_event_time AS
SELECT k, count(*) AS c FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 1 MINUTE e GROUP BY k;

CREATE OR REFRESH STREAMING TABLE distinct_count AS
SELECT window.start AS w, count(DISTINCT k) AS keys
FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 1 MINUTE e GROUP BY window(ts, '1 minute');

CREATE OR REFRESH STREAMING TABLE median_value AS
SELECT window.start AS w, median(v) AS m
FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 1 MINUTE e GROUP BY window(ts, '1 minute');

CREATE OR REFRESH STREAMING TABLE lagged AS
SELECT k, lag(v) OVER (PARTITION BY k ORDER BY ts) AS previous
FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 1 MINUTE e;

CREATE OR REFRESH STREAMING TABLE sorted AS
SELECT k, ts FROM STREAM(events) ORDER BY ts;

CREATE OR REFRESH STREAMING TABLE limited AS
SELECT k, ts FROM STREAM(events) LIMIT 10;

CREATE OR REFRESH STREAMING TABLE month_window AS
SELECT window.start AS w, count(*) AS c
FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 1 MINUTE e GROUP BY window(ts, '1 month');

CREATE OR REFRESH STREAMING TABLE outer_pairs AS
SELECT a.k FROM STREAM(events) a LEFT OUTER JOIN STREAM(unique_events) b ON a.k = b.k;

CREATE OR REFRESH STREAMING TABLE unbounded_outer AS
SELECT a.k FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 1 MINUTE a
LEFT OUTER JOIN STREAM(unique_events) WATERMARK ts DELAY OF INTERVAL 1 MINUTE b ON a.k = b.k;

CREATE OR REFRESH STREAMING TABLE inner_without_watermarks AS
SELECT a.k FROM STREAM(events) a JOIN STREAM(unique_events) b ON a.k = b.k;

-- Accepted: an interval join of two watermarked streams, inner and outer.
CREATE OR REFRESH STREAMING TABLE paired AS
SELECT a.k, a.ts AS first_at, b.ts AS then_at
FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 1 MINUTE a
FULL OUTER JOIN STREAM(unique_events) WATERMARK ts DELAY OF INTERVAL 1 MINUTE b
ON a.k = b.k AND b.ts BETWEEN a.ts AND a.ts + INTERVAL 1 HOUR;

-- Accepted: deduplication within the watermark (cdcflow's SQL for Spark's
-- dropDuplicatesWithinWatermark).
CREATE OR REFRESH STREAMING TABLE first_sightings AS
SELECT DISTINCT ON (k) k, ts, v FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 10 MINUTES AS e;

-- Refused: without a watermark, and with an order for the row kept.
CREATE OR REFRESH STREAMING TABLE dedup_forever AS
SELECT DISTINCT ON (k) k, v FROM STREAM(events);

CREATE OR REFRESH STREAMING TABLE dedup_ordered AS
SELECT DISTINCT ON (k) k, ts FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 10 MINUTES AS e ORDER BY k, ts DESC;
