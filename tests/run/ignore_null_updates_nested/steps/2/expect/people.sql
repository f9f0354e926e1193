SELECT id, addr.city AS city, addr.zip AS zip, addr IS NULL AS no_addr, name, seq FROM people
