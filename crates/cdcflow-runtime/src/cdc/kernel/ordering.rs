//! Rules 1 and 4 of docs/semantics.md: the order of a key's events. Per key the event
//! of the highest SEQUENCE BY value wins; at one sequence value a delete applies before
//! an upsert, and between two upserts the greater row wins; an exact re-delivery is one
//! event (counted as a duplicate). Nothing depends on arrival order.

use std::cmp::Ordering;

use datafusion::arrow::array::{Array, make_comparator};
use datafusion::arrow::compute::SortOptions;

use super::{Op, P, View, Walk};

impl View<'_> {
    pub(super) fn seq_cmp(&self, p: P, q: P) -> Ordering {
        self.order[p.c as usize]
            .seq
            .row(p.r as usize)
            .cmp(self.order[q.c as usize].seq.row(q.r as usize))
    }

    /// Column `c` of two rows compared, nulls first.
    pub(super) fn cell_cmp(&self, c: usize, p: P, q: P) -> Ordering {
        if p == q {
            return Ordering::Equal;
        }
        if p.c == q.c {
            return self.chunk(p).cells[c](p.r as usize, q.r as usize);
        }
        // Rows of different batches (rare: ties and merges across batches).
        let a = self.chunk(p).batch.column(c).slice(p.r as usize, 1);
        let b = self.chunk(q).batch.column(c).slice(q.r as usize, 1);
        make_comparator(a.as_ref(), b.as_ref(), SortOptions::default())
            .map_or(Ordering::Equal, |cmp| cmp(0, 0))
    }

    /// The order of two events of one key: sequence, then a delete before an upsert,
    /// then, between upserts, the greater row (docs/semantics.md rule 4). Equal means
    /// the same event: a delete is its key and sequence (its other columns are never
    /// shown, and a narrow state does not keep them).
    pub(super) fn rank(&self, p: P, q: P) -> Ordering {
        let upsert = |x: P| self.op(x) == Some(Op::Upsert);
        self.seq_cmp(p, q)
            .then_with(|| upsert(p).cmp(&upsert(q)))
            .then_with(|| {
                if !upsert(p) {
                    return Ordering::Equal;
                }
                (0..self.rules.columns.fields().len())
                    .map(|c| self.cell_cmp(c, p, q))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            })
    }

    /// Key, then rank; of two equal events the stored (earlier) one comes last.
    pub(super) fn event_order(&self, p: P, q: P) -> Ordering {
        self.key(p)
            .cmp(self.key(q))
            .then_with(|| self.rank(p, q))
            .then_with(|| q.cmp(&p))
    }
}

impl Walk<'_, '_> {
    /// Per sequence value, the greatest delete and the greatest upsert (a delete first:
    /// at equal sequence the row exists afterwards but starts afresh), into `out`.
    pub(super) fn distinct(&mut self, sorted: &[P], out: &mut Vec<P>) {
        let view = self.view;
        out.clear();
        let mut start = 0;
        while start < sorted.len() {
            let first = sorted[start];
            let op = view.op(first);
            let len = sorted[start..]
                .iter()
                .take_while(|&&q| view.seq_cmp(first, q) == Ordering::Equal && view.op(q) == op)
                .count();
            let group = &sorted[start..start + len];
            start += len;
            let Some((&chosen, losers)) = group.split_last() else {
                continue;
            };
            for &p in losers.iter().filter(|&&p| view.is_new(p)) {
                if view.rank(p, chosen) == Ordering::Equal {
                    self.metrics.duplicates += 1;
                } else if !view.is_new(chosen) {
                    self.metrics.late_dropped += 1;
                }
            }
            out.push(chosen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{decide, del, rules, up};

    #[test]
    fn the_highest_sequence_value_wins_whatever_the_arrival_order() {
        // The documentation's example: Tijuana@2, Guadalajara@6, Mexicali@5.
        let events = [
            up(125, 2, Some(2), None),
            up(125, 6, Some(6), None),
            up(125, 5, Some(5), None),
        ];
        let (rows, _) = decide(&rules(false), &[], &events, 0);
        assert_eq!(rows, vec![vec![Some(125), Some(6), None]]);
        let (rows, _) = decide(&rules(false), &events[1..], &events[..1], 0);
        assert_eq!(rows, vec![vec![Some(125), Some(6), None]]);
    }

    #[test]
    fn at_one_sequence_value_a_delete_comes_first_and_the_greater_upsert_wins() {
        let events = [
            up(1, 1, Some(7), None),
            del(1, 1),
            up(2, 1, Some(3), None),
            up(2, 1, Some(9), None),
        ];
        let (rows, _) = decide(&rules(false), &[], &events, 0);
        assert_eq!(
            rows,
            vec![vec![Some(1), Some(7), None], vec![Some(2), Some(9), None]]
        );
    }

    #[test]
    fn a_redelivered_event_is_one_event_counted_as_a_duplicate() {
        let event = up(3, 4, Some(1), Some(2));
        let (rows, metrics) = decide(&rules(true), &[event], &[event, event], 0);
        assert_eq!(rows, vec![vec![Some(3), Some(1), Some(2), Some(4), None]]);
        assert_eq!(metrics.duplicates, 2);
    }
}
