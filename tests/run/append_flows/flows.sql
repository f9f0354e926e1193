CREATE OR REFRESH STREAMING TABLE payments
AS SELECT id, upper(currency) AS currency, CAST(amount AS DOUBLE) * 100 AS cents, 'web' AS channel
FROM STREAM read_files('landing/web', format => 'json', schema => 'id BIGINT, currency STRING, amount STRING, test BOOLEAN')
WHERE NOT test;

CREATE FLOW store_payments AS INSERT INTO payments BY NAME
SELECT id, currency, CAST(amount_cents AS DOUBLE) AS cents, 'store' AS channel
FROM STREAM read_files('landing/store', format => 'csv', header => true, schema => 'id BIGINT, currency STRING, amount_cents INT');
