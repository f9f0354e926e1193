SELECT file, line, record FROM raw__quarantine
