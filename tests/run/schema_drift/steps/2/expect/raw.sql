SELECT id, name, email FROM raw ORDER BY id
