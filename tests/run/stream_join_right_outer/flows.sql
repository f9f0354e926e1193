CREATE OR REFRESH STREAMING TABLE clicked AS
SELECT i.id AS shown_id, c.id AS clicked_id, i.t1 AS shown_at, c.t2 AS clicked_at
FROM STREAM read_files('landing/impressions', format => 'json', schema => 'id STRING, t1 TIMESTAMP')
  WATERMARK t1 DELAY OF INTERVAL 1 MINUTE i
RIGHT OUTER JOIN STREAM read_files('landing/clicks', format => 'json', schema => 'id STRING, t2 TIMESTAMP')
  WATERMARK t2 DELAY OF INTERVAL 2 MINUTES c
ON i.id = c.id AND c.t2 >= i.t1 AND c.t2 <= i.t1 + INTERVAL 2 MINUTES;
