SELECT id, attrs['a'] AS a, nested['b'][2] AS b2, arrow_typeof(attrs['a']) AS t FROM mapped
