-- The password written where its variable's name belongs is refused, and not echoed.
CREATE OR REFRESH STREAMING TABLE a AS
SELECT * FROM STREAM read_postgres(connection => 'crm', table => 'public.a');
