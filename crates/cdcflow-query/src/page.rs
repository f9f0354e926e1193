//! One batch of a `read_query` read, page by page. A pass reads the rows from the
//! overlap below the highest watermark value on, in the order of [`Order`], a page of
//! at most `max_rows_per_batch` rows at a time, each page after the place of the last
//! row read (keyset pagination). A row read before (its hash in the window) is left
//! out; the batch ends when it holds `max_rows_per_batch` new rows, and the pass when a
//! page comes back short. The position records the place reached, so the next batch,
//! in this run or after a crash, goes on from there and no row is read twice or
//! skipped whatever the number of rows with one watermark value.

use std::collections::HashSet;

use crate::dialect::Dialect;
use crate::order::Order;
use crate::position::{Pass, Position, SeenRows};
use crate::watermark::{Watermark, row_hash};

/// A row as the server printed it.
pub type Row = Vec<Option<String>>;

/// What a read reads.
#[derive(Debug, Clone)]
pub struct Read<'a> {
    pub dialect: Dialect,
    /// The query as written.
    pub query: &'a str,
    pub watermark: Watermark,
    /// The watermark's place among the result's columns.
    pub column: usize,
    /// How many columns the result has.
    pub columns: usize,
    pub order: Order,
    /// The order has keys: two rows in one place are an error, not one row.
    pub keyed: bool,
    pub max_rows: usize,
}

/// Why a page cannot be taken.
#[derive(Debug, PartialEq)]
pub enum PageError {
    /// Two rows share the watermark value and keys (the place's values).
    KeysNotUnique(Row),
    /// A row with another number of values than the query's columns and the order's.
    Shape { values: usize, expected: usize },
}

/// What a batch took.
#[derive(Debug, PartialEq)]
pub struct Taken {
    /// The rows not read before, in order.
    pub rows: Vec<Row>,
    pub position: Position,
    /// The batch ended before the pass: the next batch goes on.
    pub more: bool,
    /// A pass resumed from the checkpoint ended: the batch records that, with rows or
    /// without (else each later run would go on from the old place).
    pub must_commit: bool,
}

/// A batch being read.
#[derive(Debug)]
pub struct Batch<'a> {
    read: &'a Read<'a>,
    position: Position,
    pass: Pass,
    resumed: bool,
    seen: HashSet<u64>,
    rows: Vec<Row>,
    pass_over: bool,
}

impl<'a> Batch<'a> {
    /// A batch after `position`: the pass under way when it is one of this order, else
    /// a new pass from the highest value read.
    pub fn start(read: &'a Read<'a>, mut position: Position) -> Self {
        let order = read.order.names();
        let pass = match position.pass.take() {
            Some(pass) if pass.order == order => pass,
            Some(pass) => Pass {
                after: None,
                order,
                ..pass
            },
            None => Pass {
                from: position.watermark.clone(),
                order,
                after: None,
            },
        };
        let seen = position
            .window
            .iter()
            .flat_map(|g| g.hashes.iter().copied())
            .collect();
        Self {
            read,
            resumed: pass.after.is_some(),
            position,
            pass,
            seen,
            rows: Vec::new(),
            pass_over: false,
        }
    }

    /// The SQL of the next page.
    pub fn sql(&self) -> String {
        let read = self.read;
        let inner = read.query.trim().trim_end_matches(';');
        let mut conditions = Vec::new();
        if let Some(high) = &self.pass.from {
            conditions.push(read.watermark.from_sql(
                read.dialect,
                read.order.watermark_sql(),
                high,
            ));
        }
        if let Some(place) = &self.pass.after {
            conditions.push(format!(
                "({})",
                read.order.after(place, self.pass.from.is_some())
            ));
        }
        let filter = match conditions.is_empty() {
            true => String::new(),
            false => format!(" WHERE {}", conditions.join(" AND ")),
        };
        format!(
            "SELECT cdcflow_q.*{} FROM ({inner}) AS cdcflow_q{filter}{} LIMIT {}",
            read.order.select(),
            read.order.order_by(),
            read.max_rows
        )
    }

    /// Takes a page that [`Self::sql`] returned; `true`: the batch reads another.
    pub fn take(&mut self, page: Vec<Row>) -> Result<bool, PageError> {
        let read = self.read;
        let returned = page.len();
        let mut consumed = 0;
        let mut kept = Vec::new();
        for mut row in page {
            if self.rows.len() >= read.max_rows {
                break;
            }
            let expected = read.columns + read.order.width();
            if row.len() != expected {
                return Err(PageError::Shape {
                    values: row.len(),
                    expected,
                });
            }
            let place = row.split_off(read.columns);
            if read.keyed && self.pass.after.as_ref() == Some(&place) {
                return Err(PageError::KeysNotUnique(place));
            }
            let value = row.get(read.column).cloned().flatten();
            if let Some(value) = &value {
                self.position.watermark =
                    read.watermark.higher(self.position.watermark.take(), value);
            }
            let hash = row_hash(&row);
            // A row read before, or the same as one just read (without keys, rows
            // equal in every column are one row).
            if self.seen.insert(hash) {
                kept.extend(value.map(|v| (v, hash)));
                self.rows.push(row);
            }
            self.pass.after = Some(place);
            consumed += 1;
        }
        self.remember(kept);
        // A short page taken whole is the end of the rows.
        self.pass_over = returned < read.max_rows && consumed == returned;
        Ok(!self.pass_over && self.rows.len() < read.max_rows)
    }

    /// Adds the rows just taken that are within the overlap below the highest value
    /// to the window, and drops the groups below it.
    fn remember(&mut self, taken: Vec<(String, u64)>) {
        let watermark = self.read.watermark;
        let Some(high) = self.position.watermark.clone() else {
            return;
        };
        let mut up_to: Option<String> = None;
        let mut hashes = Vec::new();
        for (value, hash) in taken {
            if watermark.in_window(&value, &high) {
                up_to = watermark.higher(up_to, &value);
                hashes.push(hash);
            }
        }
        self.position
            .window
            .retain(|g| watermark.in_window(&g.up_to, &high));
        if let Some(up_to) = up_to {
            self.position.window.push(SeenRows { up_to, hashes });
        }
    }

    pub fn finish(self) -> Taken {
        let mut position = self.position;
        let more = !self.pass_over;
        position.pass = more.then_some(self.pass);
        Taken {
            must_commit: self.resumed && !more,
            rows: self.rows,
            position,
            more,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::Column;
    use crate::watermark::Kind;

    const ID: Column<'static> = Column {
        name: "id",
        numeric: true,
    };
    const AT: Column<'static> = Column {
        name: "updated_at",
        numeric: false,
    };

    fn read(dialect: Dialect, keyed: bool, max_rows: usize) -> Read<'static> {
        Read {
            dialect,
            query: "SELECT id, updated_at FROM t;",
            watermark: Watermark {
                kind: Kind::Time,
                overlap_seconds: 60.0,
            },
            column: 1,
            columns: 2,
            order: Order::new(dialect, AT, if keyed { &[ID] } else { &[] }, &[ID, AT]),
            keyed,
            max_rows,
        }
    }

    /// A source table of (updated_at, id) rows, as the server answers a page's SQL:
    /// from the pass's start, after its place, in order, at most a page.
    fn serve(batch: &Batch<'_>, table: &[(String, i64)]) -> Vec<Row> {
        let after = batch.pass.after.as_ref().map(|p| {
            let id: i64 = p[1].as_deref().and_then(|i| i.parse().ok()).expect("an id");
            (p[0].clone().expect("a time"), id)
        });
        let mut rows: Vec<&(String, i64)> = table
            .iter()
            .filter(|(at, _)| {
                let from = batch.pass.from.as_deref();
                from.is_none_or(|h| batch.read.watermark.in_window(at, h))
            })
            .filter(|(at, id)| after.as_ref().is_none_or(|a| (at, *id) > (&a.0, a.1)))
            .collect();
        rows.sort();
        rows.truncate(batch.read.max_rows);
        rows.into_iter()
            .map(|(at, id)| {
                let (id, at) = (Some(id.to_string()), Some(at.clone()));
                vec![id.clone(), at.clone(), at, id]
            })
            .collect()
    }

    /// One batch after `position` (read back from its JSON, as from a checkpoint).
    fn batch(read: &Read<'_>, position: &Position, table: &[(String, i64)]) -> Taken {
        let position = Position::parse(&position.to_json()).expect("a position");
        let mut batch = Batch::start(read, position);
        while batch.take(serve(&batch, table)).expect("a page") {}
        batch.finish()
    }

    /// Batches until one ends its pass: the ids each took.
    fn run(read: &Read<'_>, position: &mut Position, table: &[(String, i64)]) -> Vec<Vec<i64>> {
        let mut batches = Vec::new();
        loop {
            let taken = batch(read, position, table);
            *position = taken.position;
            let ids = taken
                .rows
                .iter()
                .map(|r| r[0].as_deref().and_then(|i| i.parse().ok()).expect("an id"))
                .collect();
            batches.push(ids);
            if !taken.more {
                return batches;
            }
        }
    }

    fn at(second: u32, micros: u32) -> String {
        format!("2024-05-01 10:00:{second:02}.{micros:06}")
    }

    #[test]
    fn the_sql_of_a_page() {
        let pg = read(Dialect::Postgres, true, 1000);
        let mut batch = Batch::start(&pg, Position::default());
        assert_eq!(
            batch.sql(),
            "SELECT cdcflow_q.*, cdcflow_q.\"updated_at\" AS cdcflow_o0, cdcflow_q.\"id\" AS cdcflow_o1 FROM (SELECT id, updated_at FROM t) AS cdcflow_q ORDER BY cdcflow_q.\"updated_at\", cdcflow_q.\"id\" LIMIT 1000"
        );
        batch.pass.from = Some("2024-05-01 10:00:00".into());
        batch.pass.after = Some(vec![Some("2024-05-01 10:00:00".into()), Some("7".into())]);
        assert_eq!(
            batch.sql(),
            "SELECT cdcflow_q.*, cdcflow_q.\"updated_at\" AS cdcflow_o0, cdcflow_q.\"id\" AS cdcflow_o1 FROM (SELECT id, updated_at FROM t) AS cdcflow_q WHERE cdcflow_q.\"updated_at\" + make_interval(secs => 60) >= '2024-05-01 10:00:00' AND (cdcflow_q.\"updated_at\" >= '2024-05-01 10:00:00' AND ((cdcflow_q.\"updated_at\" > '2024-05-01 10:00:00' OR cdcflow_q.\"updated_at\" IS NULL) OR (cdcflow_q.\"updated_at\" = '2024-05-01 10:00:00' AND ((cdcflow_q.\"id\" > '7' OR cdcflow_q.\"id\" IS NULL))))) ORDER BY cdcflow_q.\"updated_at\", cdcflow_q.\"id\" LIMIT 1000"
        );
        let my = read(Dialect::Mysql, false, 5);
        let position = Position {
            watermark: Some("2024-05-01 10:00:00".into()),
            ..Position::default()
        };
        assert_eq!(
            Batch::start(&my, position).sql(),
            "SELECT cdcflow_q.*, cdcflow_q.`updated_at` AS cdcflow_o0, HEX(CAST(cdcflow_q.`id` AS BINARY)) AS cdcflow_o1 FROM (SELECT id, updated_at FROM t) AS cdcflow_q WHERE cdcflow_q.`updated_at` + INTERVAL 60000000 MICROSECOND >= '2024-05-01 10:00:00' ORDER BY cdcflow_q.`updated_at`, HEX(CAST(cdcflow_q.`id` AS BINARY)) LIMIT 5"
        );
    }

    #[test]
    fn more_rows_of_one_value_than_a_batch_are_read_once_each() {
        let read = read(Dialect::Postgres, true, 1000);
        let mut table: Vec<(String, i64)> = (1..=2505).map(|id| (at(0, 0), id)).collect();
        let mut position = Position::default();
        let batches = run(&read, &mut position, &table);
        assert_eq!(
            batches.iter().map(Vec::len).collect::<Vec<_>>(),
            [1000, 1000, 505]
        );
        let all: Vec<i64> = batches.concat();
        assert_eq!(all, (1..=2505).collect::<Vec<_>>());
        assert_eq!(position.pass, None);
        // Read again: the window holds them all, nothing is new.
        assert_eq!(run(&read, &mut position, &table), [Vec::<i64>::new()]);
        // A row committed late with the same value, and a newer one.
        table.push((at(0, 0), 9000));
        table.push((at(30, 0), 9001));
        assert_eq!(run(&read, &mut position, &table), [vec![9000, 9001]]);
        assert_eq!(position.watermark, Some(at(30, 0)));
    }

    #[test]
    fn a_burst_inside_the_overlap_is_read_once_each() {
        // 2,500 times 1 ms apart, all inside the 60 s overlap; without keys.
        let read = read(Dialect::Mysql, false, 1000);
        let mut table: Vec<(String, i64)> = (1..=2500_u32)
            .map(|i| (at(i / 1000, (i % 1000) * 1000), i64::from(i)))
            .collect();
        let mut position = Position::default();
        assert_eq!(run(&read, &mut position, &table).concat().len(), 2500);
        assert_eq!(
            run(&read, &mut position, &table).concat(),
            Vec::<i64>::new()
        );
        table.push((at(0, 500), 9000));
        assert_eq!(run(&read, &mut position, &table).concat(), [9000]);
        // The window keeps every row within the overlap, in groups up to their highest.
        let kept: usize = position.window.iter().map(|g| g.hashes.len()).sum();
        assert_eq!(kept, 2501);
        // Once the highest value moves on by more than the overlap, they are dropped.
        table.push((at(0, 0).replace("10:00", "10:05"), 9001));
        assert_eq!(run(&read, &mut position, &table).concat(), [9001]);
        assert_eq!(position.window.len(), 1);
    }

    #[test]
    fn a_pass_resumed_from_the_checkpoint_goes_on_from_its_place() {
        let read = read(Dialect::Postgres, true, 100);
        let table: Vec<(String, i64)> = (1..=250).map(|id| (at(0, 0), id)).collect();
        let first = batch(&read, &Position::default(), &table);
        assert!(first.more && first.rows.len() == 100);
        // Killed after the commit: the next run starts from the committed position.
        let second = batch(&read, &first.position, &table);
        assert_eq!(
            second.rows.first().and_then(|r| r[0].clone()),
            Some("101".into())
        );
        assert!(!second.must_commit);
        let third = batch(&read, &second.position, &table);
        assert_eq!(third.rows.len(), 50);
        assert!(!third.more && third.must_commit);
        // A pass resumed with nothing left still records its end.
        let mut ended = second.position.clone();
        if let Some(pass) = ended.pass.as_mut() {
            pass.after = Some(vec![Some(at(0, 0)), Some("250".into())]);
        }
        let empty = batch(&read, &ended, &table);
        assert!(empty.rows.is_empty() && !empty.more && empty.must_commit);
        assert_eq!(empty.position.pass, None);
        // Another order (keys changed): the pass starts again from its beginning.
        let unkeyed = self::read(Dialect::Postgres, false, 1000);
        let again = batch(&unkeyed, &first.position, &table);
        assert_eq!(again.rows.len(), 150);
    }

    #[test]
    fn a_checkpoint_of_an_earlier_version_goes_on_without_reading_a_row_twice() {
        let read = read(Dialect::Postgres, false, 1000);
        let mut table = vec![(at(0, 0), 1), (at(30, 0), 2), (at(30, 0), 3)];
        // What the earlier version kept: the highest value and the hashes of the rows
        // within the overlap below it (all three).
        let hashes: Vec<u64> = table
            .iter()
            .map(|(at, id)| row_hash(&[Some(id.to_string()), Some(at.clone())]))
            .collect();
        let old = serde_json::json!({"watermark": at(30, 0), "seen": hashes});
        let mut position = Position::parse(&old).expect("an earlier position");
        table.push((at(10, 0), 4));
        table.push((at(50, 0), 5));
        assert_eq!(run(&read, &mut position, &table), [vec![4, 5]]);
        assert_eq!(run(&read, &mut position, &table), [Vec::<i64>::new()]);
    }

    #[test]
    fn keys_shared_by_two_rows_are_an_error() {
        let read = read(Dialect::Postgres, true, 10);
        let table = vec![(at(0, 0), 1), (at(0, 0), 1)];
        let mut batch = Batch::start(&read, Position::default());
        assert_eq!(
            batch.take(serve(&batch, &table)),
            Err(PageError::KeysNotUnique(vec![
                Some(at(0, 0)),
                Some("1".into())
            ]))
        );
        // Without keys, rows equal in every column are one row.
        let unkeyed = self::read(Dialect::Postgres, false, 10);
        let mut batch = Batch::start(&unkeyed, Position::default());
        assert_eq!(batch.take(serve(&batch, &table)), Ok(false));
        assert_eq!(batch.finish().rows.len(), 1);
        let mut batch = Batch::start(&unkeyed, Position::default());
        assert_eq!(
            batch.take(vec![vec![None]]),
            Err(PageError::Shape {
                values: 1,
                expected: 4
            })
        );
    }
}
