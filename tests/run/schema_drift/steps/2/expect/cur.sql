SELECT id, name, email FROM cur ORDER BY id
