-- Dataset and flow names name folders under the storage folder: each must be one plain folder name.
CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT');
CREATE OR REFRESH STREAMING TABLE `/tmp/abs_table`;
CREATE FLOW `../../../victim` AS INSERT INTO `/tmp/abs_table` BY NAME SELECT * FROM STREAM(raw);
CREATE OR REFRESH STREAMING TABLE `${tbl}` AS SELECT * FROM STREAM(raw);
CREATE MATERIALIZED VIEW `..` AS SELECT * FROM raw;
CREATE MATERIALIZED VIEW `.hidden` AS SELECT * FROM raw;
CREATE MATERIALIZED VIEW `c:\x` AS SELECT * FROM raw;
CREATE VIEW `tab	name` AS SELECT * FROM raw;
CREATE MATERIALIZED VIEW `` AS SELECT * FROM raw;
CREATE MATERIALIZED VIEW `llllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllll` AS SELECT * FROM raw;
CREATE FLOW `.` AS INSERT INTO main.bronze.orders BY NAME SELECT * FROM STREAM(raw);
CREATE MATERIALIZED VIEW `50%_off` AS SELECT * FROM raw;
-- Fine: a qualified name (its folder is the last part), spaces, dots inside, `@`.
CREATE OR REFRESH STREAMING TABLE main.bronze.orders AS SELECT * FROM STREAM(raw);
CREATE MATERIALIZED VIEW `quoted name` AS SELECT * FROM raw;
CREATE MATERIALIZED VIEW `v1.2` AS SELECT * FROM raw;
CREATE MATERIALIZED VIEW `orders@v2` AS SELECT * FROM raw;
