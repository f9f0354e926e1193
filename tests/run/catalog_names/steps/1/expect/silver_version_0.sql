SELECT orders.id, orders.status FROM silver.orders VERSION AS OF 0
