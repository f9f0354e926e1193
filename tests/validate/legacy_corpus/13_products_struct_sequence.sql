CREATE OR REFRESH STREAMING LIVE TABLE products_bronze
AS SELECT * FROM cloud_files("${corpus.landing}/products", "json", map("cloudFiles.inferColumnTypes", "true"));

CREATE OR REFRESH STREAMING LIVE TABLE products;

APPLY CHANGES INTO LIVE.products
FROM STREAM(LIVE.products_bronze)
KEYS (sku, region)
APPLY AS DELETE WHEN op = "D"
SEQUENCE BY STRUCT(version, price)
COLUMNS * EXCEPT (op)
STORED AS SCD TYPE 1;
