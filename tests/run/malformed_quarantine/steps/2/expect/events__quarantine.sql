SELECT file, line, record FROM events__quarantine
