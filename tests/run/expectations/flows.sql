CREATE OR REFRESH STREAMING TABLE readings (
  CONSTRAINT has_device EXPECT (device IS NOT NULL) ON VIOLATION DROP ROW,
  CONSTRAINT sane EXPECT (value >= 0)
)
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'device STRING, value DOUBLE');

CREATE OR REFRESH MATERIALIZED VIEW per_device (
  CONSTRAINT few EXPECT (n < 100) ON VIOLATION FAIL UPDATE
)
AS SELECT device, count(*) AS n FROM readings GROUP BY device;
