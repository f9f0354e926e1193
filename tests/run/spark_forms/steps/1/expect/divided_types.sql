SELECT arrow_typeof(q) AS q, arrow_typeof(dec) AS dec FROM divided
