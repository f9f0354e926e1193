-- Operators that need state across the batches of a stream: rejected on a streaming
-- table (and on a view a streaming table reads as a stream), allowed on a
-- materialized view and on a join of a stream with a table read whole.
CREATE OR REFRESH STREAMING TABLE bronze
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, city STRING, amount BIGINT');

CREATE OR REFRESH STREAMING TABLE cities;

CREATE OR REFRESH STREAMING TABLE by_city
AS SELECT city, count(*) AS n FROM STREAM(bronze) GROUP BY city;

CREATE OR REFRESH STREAMING TABLE total
AS SELECT sum(amount) AS amount FROM STREAM(LIVE.bronze);

CREATE OR REFRESH STREAMING TABLE distinct_cities
AS SELECT DISTINCT city FROM STREAM(bronze);

CREATE OR REFRESH STREAMING TABLE ranked
AS SELECT id, rank() OVER (PARTITION BY city ORDER BY amount) AS r FROM STREAM(bronze);

CREATE OR REFRESH STREAMING TABLE pairs
AS SELECT a.id, b.city FROM STREAM(bronze) a JOIN STREAM(bronze_copy) b ON a.id = b.id;

CREATE OR REFRESH STREAMING TABLE bronze_copy AS SELECT * FROM STREAM(bronze);

CREATE FLOW city_counts AS INSERT INTO cities BY NAME
SELECT city, count(*) AS n FROM STREAM(bronze) GROUP BY city;

CREATE TEMPORARY VIEW per_city AS SELECT city, max(amount) AS amount FROM STREAM(bronze) GROUP BY city;
CREATE OR REFRESH STREAMING TABLE from_view AS SELECT * FROM STREAM(per_city);

-- Allowed: a stream joined with a table read whole, and materialized views.
CREATE OR REFRESH STREAMING TABLE enriched
AS SELECT b.id, c.n FROM STREAM(bronze) b JOIN by_city_mv c ON b.city = c.city;

CREATE OR REFRESH MATERIALIZED VIEW by_city_mv
AS SELECT city, count(*) AS n FROM bronze GROUP BY city;

CREATE OR REFRESH MATERIALIZED VIEW by_city_stream_mv
AS SELECT city, count(*) AS n FROM STREAM(bronze) GROUP BY city;
