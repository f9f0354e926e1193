CREATE OR REFRESH STREAMING LIVE TABLE users_history;

APPLY CHANGES INTO live.users_history
FROM stream(live.users_bronze)
KEYS (userId)
APPLY AS DELETE WHEN operation = "DELETE"
SEQUENCE BY sequenceNum
COLUMNS * EXCEPT (operation, sequenceNum)
STORED AS SCD TYPE 2
TRACK HISTORY ON * EXCEPT (city);
