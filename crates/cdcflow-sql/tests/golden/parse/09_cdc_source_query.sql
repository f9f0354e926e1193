-- AUTO CDC and APPLY CHANGES reading a query: a join, a union, a QUALIFY.
CREATE FLOW customers_cdc AS AUTO CDC INTO customers
FROM (
  SELECT c.id, t.city, c.seq FROM STREAM(LIVE.changes) c JOIN LIVE.cities t ON c.code = t.code
)
KEYS (id) SEQUENCE BY seq;

APPLY CHANGES INTO LIVE.accounts
FROM (SELECT id, seq FROM STREAM(a) UNION ALL SELECT id, seq FROM STREAM(b))
KEYS (id) SEQUENCE BY seq STORED AS SCD TYPE 2;

APPLY CHANGES INTO prices
FROM (SELECT * FROM price_list QUALIFY row_number() OVER (PARTITION BY p ORDER BY t DESC) = 1)
KEYS (p) SEQUENCE BY t;
