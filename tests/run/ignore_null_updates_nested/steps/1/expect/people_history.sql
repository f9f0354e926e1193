SELECT id, addr.city AS city, addr.zip AS zip, addr IS NULL AS no_addr, name, __START_AT AS s, __END_AT AS e FROM people_history
