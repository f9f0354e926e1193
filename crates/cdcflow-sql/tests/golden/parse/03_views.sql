CREATE VIEW recent_orders AS SELECT * FROM silver_orders WHERE order_date > '2024-01-01';
CREATE TEMPORARY VIEW staged AS SELECT * FROM STREAM(bronze_order_changes);
CREATE TEMPORARY VIEW checked (CONSTRAINT valid EXPECT (id IS NOT NULL)) AS SELECT * FROM staged;
