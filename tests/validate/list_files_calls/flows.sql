CREATE MATERIALIZED VIEW listing AS
SELECT path, size, modification_time FROM list_files('landing/days', recursive => false);

CREATE MATERIALIZED VIEW bad_recursive AS
SELECT path FROM list_files('landing/days', recursive => 'sometimes');

CREATE MATERIALIZED VIEW remote AS
SELECT path FROM list_files('landing/days', connection => 'my_drive');

CREATE MATERIALIZED VIEW unknown_option AS
SELECT path FROM list_files('landing/days', pattern => '*.csv');

CREATE MATERIALIZED VIEW no_path AS
SELECT path FROM list_files(recursive => true);

CREATE MATERIALIZED VIEW missing AS
SELECT path FROM list_files('landing/nowhere');

CREATE MATERIALIZED VIEW no_such_column AS
SELECT file FROM list_files('landing/days');
