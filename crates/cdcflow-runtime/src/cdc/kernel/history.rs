//! Rules 6 and 7 of docs/semantics.md: SCD type 2 versions are half-open
//! `[__START_AT, __END_AT)`; a delete closes the open version; consecutive upserts whose
//! tracked columns (TRACK HISTORY) are equal form one version, which shows the latest
//! untracked values.

use super::{Cells, NONE, Op, P, Walk};

impl Walk<'_, '_> {
    /// SCD type 2: the versions of a key's events.
    pub(super) fn versions(&mut self, events: &[P]) {
        let mut open: Option<(P, Cells)> = None;
        for &e in events {
            if self.view.op(e) == Some(Op::Upsert) {
                let row = self.merge(open.as_ref().map(|(_, r)| r), e);
                open = match open.take() {
                    Some((start, prev)) if self.same_tracked(&prev, &row) => Some((start, row)),
                    Some((start, prev)) => {
                        self.out.push(prev, start, e);
                        Some((e, row))
                    }
                    None => Some((e, row)),
                };
            } else if let Some((start, prev)) = open.take() {
                self.out.push(prev, start, e);
            }
        }
        if let Some((start, row)) = open {
            self.out.push(row, start, NONE);
        }
    }

    pub(super) fn same_tracked(&self, a: &Cells, b: &Cells) -> bool {
        self.view.rules.tracked.iter().all(|&c| {
            match (a.fields(c), b.fields(c), self.view.struct_width(c)) {
                (None, None, _) | (_, _, None) => self.view.cell_cmp(c, a.get(c), b.get(c)).is_eq(),
                (_, _, Some(width)) => (0..width).all(|f| {
                    self.view
                        .field_cmp(c, f, a.field(c, f), b.field(c, f))
                        .is_eq()
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{decide, del, rules, up};

    #[test]
    fn versions_are_half_open_and_a_delete_closes_the_open_one() {
        let incoming = [
            up(125, 2, Some(1), None),
            up(125, 5, Some(2), None),
            up(125, 6, Some(3), None),
            up(123, 5, Some(9), None),
            del(123, 6),
        ];
        let (rows, _) = decide(&rules(true), &[], &incoming, 0);
        let row = |id, a, start, end: Option<i64>| vec![Some(id), Some(a), None, Some(start), end];
        assert_eq!(
            rows,
            vec![
                row(123, 9, 5, Some(6)),
                row(125, 1, 2, Some(5)),
                row(125, 2, 5, Some(6)),
                row(125, 3, 6, None)
            ]
        );
    }

    #[test]
    fn a_late_event_splits_the_version_it_falls_in() {
        let stored = [up(4, 1, Some(1), None), up(4, 5, Some(5), None)];
        let (rows, _) = decide(&rules(true), &stored, &[up(4, 3, Some(3), None)], 0);
        let starts: Vec<_> = rows.iter().map(|r| (r[3], r[4])).collect();
        assert_eq!(
            starts,
            vec![(Some(1), Some(3)), (Some(3), Some(5)), (Some(5), None)]
        );
    }

    #[test]
    fn upserts_with_equal_tracked_columns_are_one_version_showing_the_latest_values() {
        let mut rules = rules(true);
        rules.tracked = vec![1];
        let incoming = [up(3, 1, Some(1), Some(1)), up(3, 2, Some(1), Some(2))];
        let (rows, _) = decide(&rules, &[], &incoming, 0);
        assert_eq!(rows, vec![vec![Some(3), Some(1), Some(2), Some(1), None]]);
    }
}
