-- Without cloudFiles.inferColumnTypes, Auto Loader reads JSON columns as strings.
CREATE OR REFRESH STREAMING LIVE TABLE events_raw_strings
AS SELECT device, CAST(reading AS DOUBLE) AS reading FROM cloud_files("${corpus.landing}/events", "json");
