//! What the checkpoint keeps of a `read_query` source: the highest watermark value
//! read, hashes of the rows read within the overlap below it (left out when read
//! again), and, while a pass over the rows from the overlap on is unfinished, where its
//! last batch stopped. Kept in the checkpoint of each batch, so a run killed between
//! two batches goes on after the last committed one.
//!
//! As JSON: `{"watermark": …, "window": [{"up_to": …, "hashes": […]}, …], "pass":
//! {"from": …, "order": […], "after": […]}}`. Checkpoints of earlier versions hold
//! `{"watermark": …, "seen": […]}` and no pass; they are read as one group of hashes up
//! to their watermark.

use serde_json::{Value, json};

/// Hashes of rows read, all with a watermark at or below `up_to`: the group is dropped
/// once `up_to` is below the overlap.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenRows {
    pub up_to: String,
    pub hashes: Vec<u64>,
}

/// A read from the overlap on, in the order of [`crate::order::Order`], that has not
/// reached the end yet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pass {
    /// The highest watermark value when the pass began, the overlap below which it
    /// reads from; `None`: the first read, from the start.
    pub from: Option<String>,
    /// The order's names ([`crate::order::Order::names`]); a pass of another order
    /// starts again from `from`.
    pub order: Vec<String>,
    /// The place of the last row read, `None` before the first.
    pub after: Option<Vec<Option<String>>>,
}

/// The position of a `read_query` source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Position {
    /// The highest watermark value read, as the server printed it.
    pub watermark: Option<String>,
    /// The rows read within the overlap below `watermark`, by groups.
    pub window: Vec<SeenRows>,
    /// The pass under way, `None` between passes.
    pub pass: Option<Pass>,
}

impl Position {
    pub fn to_json(&self) -> Value {
        let mut value = json!({
            "watermark": self.watermark,
            "window": self.window.iter().map(|g| json!({"up_to": g.up_to, "hashes": g.hashes})).collect::<Vec<_>>(),
        });
        if let (Some(pass), Some(object)) = (&self.pass, value.as_object_mut()) {
            object.insert(
                "pass".into(),
                json!({"from": pass.from, "order": pass.order, "after": pass.after}),
            );
        }
        value
    }

    /// The position a checkpoint holds, `None` when it is not one.
    pub fn parse(value: &Value) -> Option<Self> {
        let watermark = optional_text(value.get("watermark")?)?;
        let mut window = Vec::new();
        // Earlier versions: the hashes of the rows in the overlap below `watermark`.
        if let (Some(seen), Some(high)) = (value.get("seen"), &watermark) {
            let hashes = hashes(seen)?;
            if !hashes.is_empty() {
                window.push(SeenRows {
                    up_to: high.clone(),
                    hashes,
                });
            }
        }
        for group in value.get("window").map_or(Some(&vec![]), Value::as_array)? {
            window.push(SeenRows {
                up_to: group.get("up_to")?.as_str()?.to_string(),
                hashes: hashes(group.get("hashes")?)?,
            });
        }
        let pass = match value.get("pass") {
            None | Some(Value::Null) => None,
            Some(pass) => Some(Pass {
                from: optional_text(pass.get("from")?)?,
                order: pass
                    .get("order")?
                    .as_array()?
                    .iter()
                    .map(|n| n.as_str().map(String::from))
                    .collect::<Option<_>>()?,
                after: match pass.get("after")? {
                    Value::Null => None,
                    after => Some(
                        after
                            .as_array()?
                            .iter()
                            .map(optional_text)
                            .collect::<Option<_>>()?,
                    ),
                },
            }),
        };
        Some(Self {
            watermark,
            window,
            pass,
        })
    }
}

/// A string or null; `None` for anything else.
fn optional_text(value: &Value) -> Option<Option<String>> {
    match value {
        Value::Null => Some(None),
        Value::String(s) => Some(Some(s.clone())),
        _ => None,
    }
}

fn hashes(value: &Value) -> Option<Vec<u64>> {
    value.as_array()?.iter().map(Value::as_u64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_of_an_earlier_version_is_one_group_up_to_its_watermark() {
        let old = json!({"watermark": "2024-05-01 10:00:00", "seen": [3, 1]});
        assert_eq!(
            Position::parse(&old),
            Some(Position {
                watermark: Some("2024-05-01 10:00:00".into()),
                window: vec![SeenRows {
                    up_to: "2024-05-01 10:00:00".into(),
                    hashes: vec![3, 1]
                }],
                pass: None,
            })
        );
        assert_eq!(
            Position::parse(&json!({"watermark": null, "seen": []})),
            Some(Position::default())
        );
        assert_eq!(Position::parse(&json!({"watermark": 5})), None);
        assert_eq!(Position::parse(&json!("x")), None);
    }

    #[test]
    fn a_position_reads_back_as_written() {
        let p = Position {
            watermark: Some("7".into()),
            window: vec![SeenRows {
                up_to: "7".into(),
                hashes: vec![u64::MAX, 0],
            }],
            pass: Some(Pass {
                from: None,
                order: vec!["v".into(), "text(name)".into()],
                after: Some(vec![Some("7".into()), None]),
            }),
        };
        assert_eq!(Position::parse(&p.to_json()), Some(p.clone()));
        let between = Position { pass: None, ..p };
        assert!(between.to_json().get("pass").is_none());
        assert_eq!(Position::parse(&between.to_json()), Some(between));
    }
}
