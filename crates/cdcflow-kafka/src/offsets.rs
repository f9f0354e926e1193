//! Which offsets of each partition one read takes: from the position the flow's last
//! committed batch recorded (or `startingOffsets` for a partition it never read) up to
//! the partition's end when the read began, cut by `maxOffsetsPerTrigger`. Pure logic
//! on numbers the broker gave; the reading itself is `source`'s.
//!
//! A position is Spark's offset JSON, `{"topic": {"0": 12, "1": 7}}`: per partition
//! the next offset to read.

use std::collections::BTreeMap;

use cdcflow_plan::read_kafka::StartingOffsets;
use serde_json::{Map, Value};

/// A topic and a partition.
pub type Partition = (String, i32);

/// Per partition, the next offset to read.
pub type Offsets = BTreeMap<Partition, i64>;

/// The position as the checkpoint keeps it.
pub fn to_json(offsets: &Offsets) -> Value {
    let mut topics: Map<String, Value> = Map::new();
    for ((topic, partition), offset) in offsets {
        let entry = topics
            .entry(topic.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = entry {
            m.insert(partition.to_string(), Value::from(*offset));
        }
    }
    Value::Object(topics)
}

/// A position the checkpoint kept; `None` when it is not one this source wrote.
pub fn from_json(value: &Value) -> Option<Offsets> {
    let mut out = Offsets::new();
    for (topic, partitions) in value.as_object()? {
        for (p, o) in partitions.as_object()? {
            out.insert((topic.clone(), p.parse().ok()?), o.as_i64()?);
        }
    }
    Some(out)
}

/// What the broker says of a partition when the read begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The oldest offset the broker still keeps.
    pub earliest: i64,
    /// The offset the next record appended will get (the high watermark).
    pub latest: i64,
}

/// The offsets of one partition a read takes: `start..end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub start: i64,
    pub end: i64,
    /// The partition has records after `end` (the batch's size limit cut it).
    pub cut: bool,
}

/// Offsets the broker no longer has, or never had: a partition whose committed position
/// is before its earliest offset (retention deleted records not read yet) or past its
/// end (the topic was deleted and made again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    pub partition: Partition,
    pub committed: i64,
    pub bounds: Bounds,
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (topic, p) = &self.partition;
        match self.committed < self.bounds.earliest {
            true => write!(
                f,
                "{topic}-{p}: offsets {}..{} were deleted before they were read (the partition now starts at {})",
                self.committed,
                self.bounds.earliest - 1,
                self.bounds.earliest
            ),
            false => write!(
                f,
                "{topic}-{p}: the committed offset {} is past the partition's end {} (the topic was deleted and made again?)",
                self.committed, self.bounds.latest
            ),
        }
    }
}

/// Where each partition starts: its committed offset; for one never read, the
/// starting offsets asked for when the flow has read nothing yet, and the earliest
/// offset for a partition that appeared later (Spark's rule: no record of a new
/// partition is skipped). A committed offset outside the partition's bounds is a
/// [`Loss`]; with `fail_on_data_loss` false it moves to the earliest offset.
pub fn starts(
    bounds: &BTreeMap<Partition, Bounds>,
    committed: Option<&Offsets>,
    starting: &StartingOffsets,
    fail_on_data_loss: bool,
) -> Result<(Offsets, Vec<Loss>), Vec<Loss>> {
    let mut starts = Offsets::new();
    let mut losses = Vec::new();
    for (partition, b) in bounds {
        let start = match committed {
            Some(c) => match c.get(partition) {
                Some(&o) if o < b.earliest || o > b.latest => {
                    losses.push(Loss {
                        partition: partition.clone(),
                        committed: o,
                        bounds: *b,
                    });
                    b.earliest
                }
                Some(&o) => o,
                None => b.earliest,
            },
            None => match starting {
                StartingOffsets::Earliest => b.earliest,
                StartingOffsets::Latest => b.latest,
                StartingOffsets::Given(given) => {
                    match given.get(&partition.0).and_then(|t| t.get(&partition.1)) {
                        Some(-1) => b.latest,
                        Some(&o) if o >= 0 => o.clamp(b.earliest, b.latest),
                        _ => b.earliest,
                    }
                }
            },
        };
        starts.insert(partition.clone(), start);
    }
    match losses.is_empty() || !fail_on_data_loss {
        true => Ok((starts, losses)),
        false => Err(losses),
    }
}

/// The range each partition reads from `starts` to its end, at most `max` records in
/// all, shared by the partitions in proportion to their backlog (as Spark shares
/// `maxOffsetsPerTrigger`), each with a backlog taking at least one.
pub fn ranges(
    starts: &Offsets,
    bounds: &BTreeMap<Partition, Bounds>,
    max: Option<u64>,
) -> BTreeMap<Partition, Range> {
    let backlog = |p: &Partition| -> u64 {
        let end = bounds.get(p).map_or(0, |b| b.latest);
        u64::try_from(end - starts[p]).unwrap_or(0)
    };
    let total: u64 = starts.keys().map(backlog).sum();
    starts
        .iter()
        .map(|(p, &start)| {
            let left = backlog(p);
            let take = match max {
                Some(max) if total > max => {
                    // At most `max`, since `left` is at most `total`.
                    let share =
                        u64::try_from(u128::from(left) * u128::from(max) / u128::from(total))
                            .unwrap_or(max);
                    share.max(u64::from(left > 0)).min(left)
                }
                _ => left,
            };
            let range = Range {
                start,
                end: start + take as i64,
                cut: take < left,
            };
            (p.clone(), range)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(t: &str, n: i32) -> Partition {
        (t.to_string(), n)
    }

    fn bounds(list: &[(&str, i32, i64, i64)]) -> BTreeMap<Partition, Bounds> {
        list.iter()
            .map(|(t, n, earliest, latest)| {
                (
                    p(t, *n),
                    Bounds {
                        earliest: *earliest,
                        latest: *latest,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn positions_round_trip_as_spark_writes_them() {
        let o: Offsets = [(p("a", 0), 5), (p("a", 1), 7), (p("b", 0), 0)].into();
        let json = to_json(&o);
        assert_eq!(json.to_string(), r#"{"a":{"0":5,"1":7},"b":{"0":0}}"#);
        assert_eq!(from_json(&json), Some(o));
        assert_eq!(from_json(&Value::from(3)), None);
    }

    #[test]
    fn a_first_read_starts_where_asked_and_a_new_partition_at_its_earliest() {
        let b = bounds(&[("a", 0, 2, 10), ("a", 1, 0, 4)]);
        let (s, _) = starts(&b, None, &StartingOffsets::Latest, true).unwrap();
        assert_eq!(s, [(p("a", 0), 10), (p("a", 1), 4)].into());
        let (s, _) = starts(&b, None, &StartingOffsets::Earliest, true).unwrap();
        assert_eq!(s, [(p("a", 0), 2), (p("a", 1), 0)].into());
        let given = StartingOffsets::Given([("a".to_string(), [(0, 5), (1, -1)].into())].into());
        let (s, _) = starts(&b, None, &given, true).unwrap();
        assert_eq!(s, [(p("a", 0), 5), (p("a", 1), 4)].into());
        // Partition 1 appeared after the last commit: all of it is read.
        let committed: Offsets = [(p("a", 0), 7)].into();
        let (s, _) = starts(&b, Some(&committed), &StartingOffsets::Latest, true).unwrap();
        assert_eq!(s, [(p("a", 0), 7), (p("a", 1), 0)].into());
    }

    #[test]
    fn deleted_offsets_fail_naming_the_partition_and_the_gap_unless_allowed() {
        let b = bounds(&[("a", 0, 20, 30), ("a", 1, 0, 4)]);
        let committed: Offsets = [(p("a", 0), 12), (p("a", 1), 4)].into();
        let lost = starts(&b, Some(&committed), &StartingOffsets::Latest, true).unwrap_err();
        assert_eq!(lost.len(), 1);
        assert_eq!(
            lost[0].to_string(),
            "a-0: offsets 12..19 were deleted before they were read (the partition now starts at 20)"
        );
        let (s, lost) = starts(&b, Some(&committed), &StartingOffsets::Latest, false).unwrap();
        assert_eq!(s[&p("a", 0)], 20);
        assert_eq!(lost.len(), 1);
        let past: Offsets = [(p("a", 1), 9)].into();
        let lost = starts(&b, Some(&past), &StartingOffsets::Latest, true).unwrap_err();
        assert!(lost[0].to_string().contains("past the partition's end 4"));
    }

    #[test]
    fn the_limit_is_shared_by_backlog_and_every_backlog_moves() {
        let b = bounds(&[("a", 0, 0, 100), ("a", 1, 0, 10), ("a", 2, 0, 0)]);
        let s: Offsets = [(p("a", 0), 0), (p("a", 1), 9), (p("a", 2), 0)].into();
        let r = ranges(&s, &b, Some(10));
        assert_eq!(
            r[&p("a", 0)],
            Range {
                start: 0,
                end: 9,
                cut: true
            }
        );
        assert_eq!(
            r[&p("a", 1)],
            Range {
                start: 9,
                end: 10,
                cut: false
            }
        );
        assert_eq!(
            r[&p("a", 2)],
            Range {
                start: 0,
                end: 0,
                cut: false
            }
        );
        let r = ranges(&s, &b, None);
        assert_eq!(r[&p("a", 0)].end, 100);
        assert!(!r[&p("a", 0)].cut);
    }
}
