SELECT q DIV 2 AS quarter FROM divided
