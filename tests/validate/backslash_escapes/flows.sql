-- Spark's backslash escapes in string literals: a quote, a backslash, a tab.
CREATE OR REFRESH MATERIALIZED VIEW base AS SELECT 'it\'s' AS s, 'a\\b' AS t, 'tab\there' AS u, "say \"hi\"" AS v;
CREATE OR REFRESH MATERIALIZED VIEW filtered AS SELECT s FROM base WHERE s = 'it\'s' OR s LIKE 'x\_%';
