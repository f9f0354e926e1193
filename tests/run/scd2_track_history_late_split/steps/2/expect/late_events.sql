SELECT flow, batch, late, late_applied, late_dropped FROM event_log WHERE event = 'flow_completed' AND flow = 'users_flow'
