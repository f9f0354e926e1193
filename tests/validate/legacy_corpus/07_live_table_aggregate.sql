CREATE OR REFRESH LIVE TABLE users_per_city
COMMENT "Materialized view in the older syntax"
AS SELECT city, count(*) AS users FROM LIVE.users_current GROUP BY city;
