SELECT _flow, _batch, k, ts, v, _window_start, _window_end, _watermark FROM per_minute__late
