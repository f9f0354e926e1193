CREATE OR REFRESH STREAMING LIVE TABLE events_bronze (
  CONSTRAINT has_device EXPECT (device IS NOT NULL) ON VIOLATION DROP ROW,
  CONSTRAINT sane_reading EXPECT (reading >= 0)
)
TBLPROPERTIES (delta.enableChangeDataFeed = true)
AS SELECT * FROM cloud_files("${corpus.landing}/events", "json",
  map("cloudFiles.inferColumnTypes", "true", "cloudFiles.useNotifications", "true", "cloudFiles.schemaLocation", "/mnt/schemas/events"));
