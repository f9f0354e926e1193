-- APPLY CHANGES without STORED AS (SCD type 1) and without COLUMNS (all columns).
CREATE OR REFRESH STREAMING LIVE TABLE users_current;

APPLY CHANGES INTO LIVE.users_current
FROM STREAM(LIVE.users_changes_v)
KEYS(userId)
SEQUENCE BY sequenceNum;
