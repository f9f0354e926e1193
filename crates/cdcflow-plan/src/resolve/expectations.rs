//! Expectations (`CONSTRAINT name EXPECT (condition) [ON VIOLATION …]`), checked
//! without data: each condition plans over the rows every query flow into its table
//! gives, and is a condition (BOOLEAN). A run evaluates them on the batch's rows
//! (`cdcflow-runtime/src/expectations.rs`); what it would refuse there is refused here.

use super::*;

impl Resolver<'_> {
    pub(super) fn check_expectations(&mut self) {
        for d in 0..self.datasets.len() {
            let expectations = self.datasets[d].def.expectations.clone();
            if expectations.is_empty() {
                continue;
            }
            let (file, table) = (self.datasets[d].file, self.datasets[d].name.clone());
            for f in self.flows_into(&table) {
                if self.flows[f].auto_cdc().is_some() {
                    continue;
                }
                // The rows as the table stores them: columns without the query's qualifiers.
                let Some(Ok(schema)) = self.flows[f]
                    .plan
                    .as_ref()
                    .map(|p| DFSchema::try_from(p.schema().as_arrow().clone()))
                else {
                    continue;
                };
                for e in &expectations {
                    let name = &e.name.value;
                    let problem = match self.planner.plan_expr(&e.condition, &schema) {
                        Err(err) => Some(crate::df_message::user_message(&err)),
                        Ok(expr) => match expr.get_type(&schema) {
                            Ok(DataType::Boolean | DataType::Null) => None,
                            Ok(other) => Some(format!("it is {other}, not a condition (BOOLEAN)")),
                            Err(err) => Some(crate::df_message::user_message(&err)),
                        },
                    };
                    if let Some(problem) = problem {
                        let flow = self.flows[f].name.clone();
                        self.error(
                            file,
                            e.span,
                            "cdcflow::expectation",
                            format!("expectation `{name}` of `{table}`: {problem}"),
                            "this expectation",
                            Some(format!(
                                "an expectation is a condition on the rows flow `{flow}` writes into `{table}`: it names their columns and is true or false"
                            )),
                        );
                    }
                }
            }
        }
    }
}
