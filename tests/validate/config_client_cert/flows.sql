-- A client certificate without its key (`sslkey:` or `sslkey_env:`) is refused at the
-- connection's entry in pipeline.yaml.
CREATE OR REFRESH STREAMING TABLE a AS
SELECT * FROM STREAM read_postgres(connection => 'crm', table => 'public.a');
