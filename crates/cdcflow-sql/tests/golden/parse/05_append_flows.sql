CREATE OR REFRESH STREAMING TABLE all_events;
CREATE FLOW us_events AS INSERT INTO all_events BY NAME SELECT * FROM STREAM(us_raw);
CREATE FLOW eu_events COMMENT 'EU region' AS INSERT INTO all_events BY NAME
SELECT id, cast(ts AS TIMESTAMP) AS ts, upper(region) AS region FROM STREAM eu_raw WHERE id IS NOT NULL;
CREATE FLOW history_load AS INSERT ONCE INTO all_events BY NAME SELECT * FROM old_events;
