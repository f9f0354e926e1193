//! Rule 1 of docs/semantics.md, and what the state keeps of a key (docs/semantics.md,
//! "How the state is kept"): of a key's admitted events in rank order, SCD type 1
//! keeps the winner (with IGNORE NULL UPDATES, every upsert since the last delete) and
//! shows the winner's row; SCD type 2 keeps every event and shows its versions.

use super::{Cells, NONE, Op, P, Walk};

impl Walk<'_, '_> {
    /// A key with incoming events, given its distinct and admitted events in rank
    /// order: compacted and published.
    pub(super) fn decide(&mut self, events: &[P]) {
        let view = self.view;
        let Some(&last) = events.last() else {
            return;
        };
        if view.is_new(last) {
            match view.op(last) {
                Some(Op::Upsert) => self.metrics.upserted += 1,
                _ => self.metrics.deleted += 1,
            }
        }
        let keep: &[P] = if view.rules.scd2 {
            events
        } else if view.rules.ignore_null.is_empty() {
            &events[events.len() - 1..]
        } else {
            // A late upsert may still fill a column a newer upsert left null, back to
            // the last delete.
            let from = events
                .iter()
                .rposition(|&p| view.op(p) == Some(Op::Delete))
                .unwrap_or(0);
            &events[from..]
        };
        self.count_late(events, events.len() - keep.len());
        if let [only] = keep
            && !view.rules.scd2
            && view.expired(*only, self.horizon)
        {
            self.collect(*only);
            return;
        }
        self.kept.extend_from_slice(keep);
        self.publish(keep);
    }

    /// The visible rows of a key's kept events.
    pub(super) fn publish(&mut self, events: &[P]) {
        if self.view.rules.scd2 {
            self.versions(events);
        } else {
            let mut row: Option<Cells> = None;
            for &e in events {
                row = match self.view.op(e) {
                    Some(Op::Upsert) => Some(self.merge(row.as_ref(), e)),
                    _ => None,
                };
            }
            if let Some(row) = row {
                self.out.push(row, NONE, NONE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{decide, del, rules, up};

    #[test]
    fn a_key_shows_its_winners_row_and_a_delete_shows_none() {
        let incoming = [
            up(1, 1, Some(1), None),
            del(1, 2),
            up(2, 1, Some(3), Some(4)),
        ];
        let (rows, metrics) = decide(&rules(false), &[], &incoming, 0);
        assert_eq!(rows, vec![vec![Some(2), Some(3), Some(4)]]);
        assert_eq!((metrics.upserted, metrics.deleted), (1, 1));
    }

    #[test]
    fn a_newer_upsert_revives_a_deleted_key() {
        let (rows, _) = decide(&rules(false), &[del(1, 2)], &[up(1, 3, Some(5), None)], 0);
        assert_eq!(rows, vec![vec![Some(1), Some(5), None]]);
    }
}
