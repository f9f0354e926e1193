-- Two- and three-part names that name datasets of this pipeline.
CREATE OR REFRESH LIVE TABLE big_orders
AS SELECT * FROM main.sales.orders_bronze WHERE amount > ${corpus.min_amount};
