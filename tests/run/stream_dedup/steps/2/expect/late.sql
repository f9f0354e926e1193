SELECT _flow, _batch, id, ts, payload, _watermark, _reason FROM deliveries__late
