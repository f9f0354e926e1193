CREATE OR REFRESH STREAMING LIVE TABLE orders_current;

APPLY CHANGES INTO LIVE.orders_current
FROM STREAM(LIVE.orders_bronze)
KEYS(order_id, customer_id)
IGNORE NULL UPDATES
APPLY AS DELETE WHEN op = 'D'
SEQUENCE BY ts
COLUMNS order_id, customer_id, amount
WHERE amount IS NOT NULL;
