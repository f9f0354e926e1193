//! Rows set apart: a change whose value has no value of its column's type
//! (`infinity` in a DATE, `NaN` in a DECIMAL: [`crate::types`]) is not in the rows a
//! read yields but beside them, as its values in PostgreSQL's text with the reason,
//! for the run to keep in the flow's quarantine table as it keeps a malformed landing
//! record. The snapshot copy and the stream gather rows the same way, so both set the
//! same values apart.

use std::collections::BTreeMap;

use cdcflow_runtime::sources::{CarriedCell, RejectedRow};
use datafusion::arrow::array::BooleanArray;

use crate::changes::{ChangeMeta, TableColumn};
use crate::types::TextColumn;

/// What every reason ends with.
const KEEP_TEXT: &str =
    " (declare the column STRING in read_postgres's `schema =>` to keep PostgreSQL's text)";

/// The rows of one read set apart, each with its reasons.
#[derive(Debug, Default)]
pub(crate) struct SetApart {
    reasons: BTreeMap<usize, Vec<String>>,
}

impl SetApart {
    pub(crate) fn add(&mut self, row: usize, why: String) {
        self.reasons.entry(row).or_default().push(why);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.reasons.is_empty()
    }

    /// True for each of `rows` rows that is kept.
    pub(crate) fn kept(&self, rows: usize) -> BooleanArray {
        BooleanArray::from_iter((0..rows).map(|r| Some(!self.reasons.contains_key(&r))))
    }

    /// The cells to carry over, numbered among the kept rows; those of rows set apart
    /// go with them.
    pub(crate) fn renumber(&self, cells: Vec<CarriedCell>) -> Vec<CarriedCell> {
        cells
            .into_iter()
            .filter(|c| !self.reasons.contains_key(&c.row))
            .map(|c| CarriedCell {
                row: c.row - self.reasons.range(..c.row).count(),
                ..c
            })
            .collect()
    }

    /// Each row set apart as a JSON object of its values as PostgreSQL printed them
    /// (in the table's column order) and its change metadata, with its reasons.
    pub(crate) fn records(
        &self,
        columns: &[TableColumn],
        values: &[TextColumn],
        meta: &[ChangeMeta],
    ) -> Vec<RejectedRow> {
        self.reasons
            .iter()
            .map(|(&row, reasons)| {
                let mut fields: Vec<String> = columns
                    .iter()
                    .zip(values)
                    .map(|(c, v)| {
                        let value = v.values.get(row).cloned().flatten();
                        format!(
                            "{}:{}",
                            json(&c.name),
                            value.as_deref().map_or("null".into(), json)
                        )
                    })
                    .collect();
                if let Some(m) = meta.get(row) {
                    fields.push(format!("\"_change_type\":{}", json(m.kind.as_str())));
                    fields.push(format!("\"_commit_lsn\":{}", m.commit_lsn));
                    fields.push(format!("\"_change_seq\":{}", m.seq));
                    if let Some(xid) = m.xid {
                        fields.push(format!("\"_xid\":{xid}"));
                    }
                }
                RejectedRow {
                    record: format!("{{{}}}", fields.join(",")),
                    error: format!("{}{KEEP_TEXT}", reasons.join("; ")),
                }
            })
            .collect()
    }
}

/// `s` as a JSON string.
fn json(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changes::ChangeKind;

    #[test]
    fn rows_set_apart_keep_their_text_and_the_rest_renumber() {
        let mut apart = SetApart::default();
        apart.add(1, "column `d`: why".into());
        let columns = vec![TableColumn {
            name: "d".into(),
            type_oid: 1082,
            type_modifier: -1,
            not_null: false,
            keep_text: false,
            default: None,
        }];
        let values = vec![TextColumn {
            values: vec![Some("2024-05-01".into()), Some("infinity".into()), None],
        }];
        let meta = ChangeMeta {
            kind: ChangeKind::Insert,
            commit_lsn: 42,
            seq: 3,
            commit_micros: None,
            xid: Some(7),
        };
        let records = apart.records(&columns, &values, &[meta; 3]);
        assert_eq!(
            records,
            vec![RejectedRow {
                record: r#"{"d":"infinity","_change_type":"insert","_commit_lsn":42,"_change_seq":3,"_xid":7}"#.into(),
                error: format!("column `d`: why{KEEP_TEXT}"),
            }]
        );
        let cell = |row| CarriedCell {
            row,
            column: "d".into(),
            key: None,
        };
        assert_eq!(
            apart.renumber(vec![cell(0), cell(1), cell(2)]),
            vec![cell(0), cell(1)]
        );
        assert_eq!(apart.kept(3), BooleanArray::from(vec![true, false, true]));
    }
}
