-- A PostgreSQL connection by its Unix-domain socket (a directory as `host:`) carries
-- no TLS, so a `sslmode:` that demands TLS is refused at the connection's entry.
CREATE OR REFRESH STREAMING TABLE a AS
SELECT * FROM STREAM read_postgres(connection => 'crm', table => 'public.a');
