SELECT arrow_typeof(age) AS age_type, arrow_typeof(id) AS id_type FROM people LIMIT 1
