-- MAP<key, value> in schema => strings, nested either way; a MAP without its value type
-- is an invalid schema.
CREATE OR REFRESH STREAMING TABLE products
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT, attrs MAP<STRING, STRING>, sizes ARRAY<MAP<STRING, INT>>, meta STRUCT<labels: MAP<STRING, ARRAY<BIGINT>>>');

CREATE OR REFRESH MATERIALIZED VIEW colors AS SELECT id, attrs['color'] AS color FROM products;

CREATE OR REFRESH STREAMING TABLE broken
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, attrs MAP<STRING>');
