SELECT id, name FROM cur ORDER BY id
