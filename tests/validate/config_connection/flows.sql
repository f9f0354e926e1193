-- The password is refused where it is written (pipeline.yaml line 8).
CREATE OR REFRESH STREAMING TABLE a AS
SELECT * FROM STREAM read_postgres(connection => 'crm', table => 'public.a');
