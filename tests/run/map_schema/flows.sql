-- MAP<…> in a read_files schema, alone and nested in an ARRAY and a STRUCT.
CREATE OR REFRESH STREAMING TABLE products
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT, attrs MAP<STRING, STRING>, sizes ARRAY<MAP<STRING, INT>>, meta STRUCT<labels: MAP<STRING, BIGINT>>');

CREATE OR REFRESH MATERIALIZED VIEW colors
AS SELECT id, attrs['color'] AS color, sizes[1]['eu'] AS eu, meta.labels['rank'] AS rank FROM products;
