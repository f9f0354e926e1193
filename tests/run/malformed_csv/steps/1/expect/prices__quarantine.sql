SELECT file, line, record FROM prices__quarantine ORDER BY line
