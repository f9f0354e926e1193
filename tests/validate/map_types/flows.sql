-- MAP<key, value> in schema => strings, nested either way; a MAP without its value type
-- is an invalid schema.
CREATE OR REFRESH STREAMING TABLE products
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT, attrs MAP<STRING, STRING>, sizes ARRAY<MAP<STRING, INT>>, meta STRUCT<labels: MAP<STRING, ARRAY<BIGINT>>>');

CREATE OR REFRESH MATERIALIZED VIEW colors AS SELECT id, attrs['color'] AS color FROM products;

CREATE OR REFRESH STREAMING TABLE broken
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, attrs MAP<STRING>');

-- In a column list too, nested in ARRAY and STRUCT; a MAP without its value type is a
-- syntax error where the `,` should be.
CREATE OR REFRESH MATERIALIZED VIEW listed (sizes ARRAY<MAP<STRING, INT>>, meta STRUCT<labels: MAP<STRING, ARRAY<BIGINT>>>)
AS SELECT sizes, meta FROM products;
CREATE OR REFRESH MATERIALIZED VIEW listed_broken (sizes ARRAY<MAP<STRING>>) AS SELECT sizes FROM products;
