SELECT flow, batch, file, record, error FROM changes__quarantine
