/* Older pipelines often start with a block comment
   and use LIVE. in upper case. */
CREATE LIVE TABLE products_by_region
COMMENT "one row per region"
AS SELECT region, count(*) AS skus
FROM LIVE.products
GROUP BY region;
