//! Rules on flows and targets that need no schema, and the dataset graph: order and cycles.

use super::*;

impl Resolver<'_> {
    // ---- rules that need no schema -------------------------------------------------

    pub(super) fn check_cdc_clauses(&mut self, cdc: &AutoCdc, file: FileId) {
        let scd = cdc.scd_type();
        let bitemporal = cdc
            .stored_as_bitemporal
            .or(cdc.system_sequence_by.as_ref().map(|s| s.span));
        if let Some(span) = bitemporal {
            self.error(
                file,
                span,
                "cdcflow::bitemporal",
                "bitemporal tables (STORED AS BITEMPORAL, SYSTEM SEQUENCE BY; Databricks Beta) are not supported".into(),
                "bitemporal",
                Some("cdcflow keeps one time axis, the SEQUENCE BY order: SCD TYPE 2 keeps each key's history along it (__START_AT, __END_AT); a second, system-time axis of when each version was recorded is not kept. Use STORED AS SCD TYPE 2".into()),
            );
        }
        if let Some(s) = &cdc.stored_as
            && !(s.node == 1 || s.node == 2)
        {
            self.error(
                file,
                s.span,
                "cdcflow::scd_type",
                format!("SCD type {} does not exist", s.node),
                "unsupported SCD type",
                Some("use STORED AS SCD TYPE 1 (current state) or SCD TYPE 2 (history)".into()),
            );
        }
        if scd == 2
            && let Some(t) = &cdc.apply_as_truncate
        {
            self.error(
                file,
                t.span,
                "cdcflow::truncate_scd2",
                "APPLY AS TRUNCATE is not supported with SCD TYPE 2".into(),
                "TRUNCATE with SCD TYPE 2",
                Some("a truncate would erase history; it is only allowed for SCD TYPE 1".into()),
            );
        }
        if scd == 1
            && let Some(t) = &cdc.track_history
        {
            self.error(
                file,
                t.span,
                "cdcflow::track_history_scd1",
                "TRACK HISTORY needs STORED AS SCD TYPE 2".into(),
                "TRACK HISTORY with SCD TYPE 1",
                Some(
                    "SCD TYPE 1 keeps no history; add STORED AS SCD TYPE 2 or remove TRACK HISTORY"
                        .into(),
                ),
            );
        }
    }

    /// Checks rules about which flows may write into a dataset.
    pub(super) fn check_targets(&mut self) {
        for d in 0..self.datasets.len() {
            let name = self.datasets[d].name.clone();
            let flows = self.flows_into(&name);
            let cdc: Vec<usize> = flows
                .iter()
                .copied()
                .filter(|&f| self.flows[f].auto_cdc().is_some())
                .collect();
            if cdc.is_empty() {
                continue;
            }
            let first_cdc = self.position(self.flows[cdc[0]].file, self.flows[cdc[0]].span);
            for &f in flows.iter().filter(|f| !cdc.contains(f)) {
                let (file, span, fname) = (
                    self.flows[f].file,
                    self.flows[f].span,
                    self.flows[f].name.clone(),
                );
                self.error(file, span, "cdcflow::mixed_target", format!("flow `{fname}` appends into `{name}`, which is an AUTO CDC target"), "non-CDC flow", Some(format!("`{name}` is maintained by AUTO CDC (flow at {first_cdc}); its rows are keyed, so write changes through another AUTO CDC flow or into another table")));
            }
        }
    }

    // ---- graph ---------------------------------------------------------------------

    /// Datasets in dependency order; reports cycles (their datasets are left out).
    pub(super) fn order_datasets(&mut self) -> Vec<usize> {
        let n = self.datasets.len();
        let mut deps: Vec<Vec<usize>> = vec![vec![]; n];
        for f in &self.flows {
            let Some(t) = self.dataset_index(&f.target) else {
                continue;
            };
            for i in &f.inputs {
                if let Input::Dataset { name, .. } = i
                    && let Some(s) = self.dataset_index(name)
                {
                    deps[t].push(s);
                }
            }
            if let Some(s) = self
                .planned_after(&f.target)
                .and_then(|a| self.dataset_index(a))
            {
                deps[t].push(s);
            }
        }
        // Iterative DFS with colours, to find a cycle path to report.
        let mut state = vec![0u8; n]; // 0 new, 1 on stack, 2 done
        let mut order = Vec::new();
        let mut in_cycle = vec![false; n];
        for start in 0..n {
            if state[start] != 0 {
                continue;
            }
            let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
            state[start] = 1;
            while let Some(&mut (node, ref mut next)) = stack.last_mut() {
                if *next < deps[node].len() {
                    let dep = deps[node][*next];
                    *next += 1;
                    match state[dep] {
                        0 => {
                            state[dep] = 1;
                            stack.push((dep, 0));
                        }
                        1 => {
                            let pos = stack.iter().position(|(x, _)| *x == dep).unwrap_or(0);
                            let cycle: Vec<usize> = stack[pos..].iter().map(|(x, _)| *x).collect();
                            if cycle.iter().any(|&c| in_cycle[c]) {
                                continue;
                            }
                            for &c in &cycle {
                                in_cycle[c] = true;
                            }
                            self.report_cycle(&cycle);
                        }
                        _ => {}
                    }
                } else {
                    state[node] = 2;
                    order.push(node);
                    stack.pop();
                }
            }
        }
        order.retain(|&d| !in_cycle[d]);
        order
    }

    pub(super) fn report_cycle(&mut self, cycle: &[usize]) {
        let mut names: Vec<String> = cycle
            .iter()
            .map(|&d| self.datasets[d].name.clone())
            .collect();
        names.push(names[0].clone());
        let last = *cycle.last().unwrap_or(&cycle[0]);
        let reader = self.datasets[last].name.clone();
        let first = self.datasets[cycle[0]].name.clone();
        // Point at the flow of `reader` that reads `first`… which closes the cycle.
        let flow = self
            .flows
            .iter()
            .find(|f| f.target.eq_ignore_ascii_case(&first) && f.inputs.iter().any(|i| matches!(i, Input::Dataset { name, .. } if name.eq_ignore_ascii_case(&reader))));
        let (file, span) = flow.map_or(
            (
                self.datasets[cycle[0]].file,
                self.datasets[cycle[0]].def.name.span,
            ),
            |f| (f.file, f.span),
        );
        names.reverse();
        self.error(
            file,
            span,
            "cdcflow::cycle",
            format!(
                "datasets depend on each other in a cycle: {}",
                names.join(" → ")
            ),
            "closes the cycle",
            Some("a dataset cannot read itself, directly or through other datasets".into()),
        );
    }

    pub(super) fn order_flows(&self, datasets: &[usize]) -> Vec<usize> {
        let mut order = Vec::new();
        for &d in datasets {
            let name = &self.datasets[d].name;
            order.extend(
                (0..self.flows.len()).filter(|&f| self.flows[f].target.eq_ignore_ascii_case(name)),
            );
        }
        order
    }
}
