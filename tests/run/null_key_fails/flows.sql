-- Rows that cannot be applied are named by the landing file they came from: the commit
-- that appended them to `raw` names its landing files, on an incremental read (step 2)
-- and on a first read after a full refresh (step 3).
CREATE OR REFRESH STREAMING TABLE raw
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, v STRING, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE target;
CREATE FLOW apply_raw AS AUTO CDC INTO target FROM STREAM(raw) KEYS (id) SEQUENCE BY seq;
