-- `run` validates first: a count per city over a stream without a watermark, which
-- no watermark would ever close, is refused before anything is read.
CREATE OR REFRESH STREAMING TABLE bronze
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, city STRING');

CREATE OR REFRESH STREAMING TABLE by_city
AS SELECT city, count(*) AS n FROM STREAM(bronze) GROUP BY city;
