SELECT id, a[1]['a'] AS a1, s.x['k'] AS xk, s.y AS y, arrow_typeof(s.x['k']) AS xk_type FROM nested_maps
