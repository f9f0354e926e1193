CREATE OR REFRESH STREAMING TABLE b AS SELECT * FROM STREAM read_files('${my_etl.landing}', format => 'json', schema => 'id BIGINT');
CREATE MATERIALIZED VIEW m AS SELECT * FROM b WHERE id > ${missing.key} AND idd > 1;
