//! Rules 2, 3 and 8 of docs/semantics.md: which events a key takes. An event older than
//! the newest TRUNCATE is dropped (a stored upsert it removes is counted truncated); an
//! upsert for a key with no state older than the collected-tombstone horizon may be
//! resurrecting a deleted row, so it is dropped and reported; SCD type 1 tombstones past
//! their retention are collected and move the horizon; late events are counted as
//! applied or dropped.

use std::cmp::Ordering;

use super::{Op, P, View, Walk};

/// The newest TRUNCATE and collected-tombstone horizon.
pub(super) struct Markers {
    pub(super) truncate: Option<P>,
    pub(super) gc: Option<P>,
}

impl View<'_> {
    pub(super) fn markers(&self) -> Markers {
        let mut truncate: Option<P> = None;
        let mut gc: Option<P> = None;
        for (c, chunk) in self.chunks.iter().enumerate() {
            for (r, &op) in chunk.ops.values().iter().enumerate() {
                let slot = match Op::of(op) {
                    Some(Op::Truncate) => &mut truncate,
                    Some(Op::GcHorizon) => &mut gc,
                    _ => continue,
                };
                let p = P::at(c, r);
                if slot.is_none_or(|m| self.seq_cmp(p, m) == Ordering::Greater) {
                    *slot = Some(p);
                }
            }
        }
        Markers { truncate, gc }
    }

    pub(super) fn older_than(&self, p: P, marker: Option<P>) -> bool {
        marker.is_some_and(|m| self.seq_cmp(p, m) == Ordering::Less)
    }

    pub(super) fn expired(&self, p: P, horizon: i64) -> bool {
        self.op(p) == Some(Op::Delete) && self.chunk(p).recorded.value(p.r as usize) < horizon
    }
}

impl Walk<'_, '_> {
    /// `events` without those a TRUNCATE or a collected tombstone made obsolete, into
    /// `out`; counts the late it drops ([`Self::decide`] counts the others).
    pub(super) fn admit(&mut self, events: &[P], out: &mut Vec<P>) {
        let view = self.view;
        let no_state = events.iter().all(|&p| view.is_new(p));
        out.clear();
        for &p in events {
            if view.older_than(p, self.markers.truncate) {
                if view.is_new(p) {
                    self.metrics.late_dropped += 1;
                } else if view.op(p) == Some(Op::Upsert) {
                    self.metrics.truncated += 1;
                }
                continue;
            }
            if view.is_new(p)
                && no_state
                && view.op(p) == Some(Op::Upsert)
                && view.older_than(p, self.markers.gc)
            {
                self.metrics.late_after_gc += 1;
                continue;
            }
            out.push(p);
        }
    }

    /// Counts the incoming events of a key older than its newest stored one: applied
    /// when the key keeps them (`events[kept_from..]`), dropped when it does not.
    pub(super) fn count_late(&mut self, events: &[P], kept_from: usize) {
        let view = self.view;
        let Some(&newest_stored) = events.iter().rev().find(|&&p| !view.is_new(p)) else {
            return;
        };
        for (i, &p) in events.iter().enumerate() {
            if view.is_new(p) && view.seq_cmp(p, newest_stored) == Ordering::Less {
                match i >= kept_from {
                    true => self.metrics.late_applied += 1,
                    false => self.metrics.late_dropped += 1,
                }
            }
        }
    }

    pub(super) fn collect(&mut self, p: P) {
        self.metrics.tombstones_collected += 1;
        let newest = self.new_gc.or(self.markers.gc);
        if newest.is_none_or(|g| self.view.seq_cmp(p, g) == Ordering::Greater) {
            self.new_gc = Some(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{decide, del, gc_horizon, rules, truncate, up};

    #[test]
    fn a_truncate_removes_older_keys_and_makes_older_events_late() {
        let stored = [up(124, 1, Some(1), None), up(125, 6, Some(6), None)];
        let incoming = [truncate(3), up(126, 2, Some(2), None)];
        let (rows, metrics) = decide(&rules(false), &stored, &incoming, 0);
        assert_eq!(rows, vec![vec![Some(125), Some(6), None]]);
        assert_eq!((metrics.truncated, metrics.late_dropped), (1, 1));
    }

    #[test]
    fn a_tombstone_drops_a_late_upsert_and_is_collected_after_its_retention() {
        let (rows, metrics) = decide(&rules(false), &[del(1, 8)], &[up(1, 7, Some(1), None)], 5);
        assert!(rows.is_empty(), "{rows:?}");
        assert_eq!((metrics.late_dropped, metrics.tombstones_collected), (1, 0));
        // Retention is 10 µs: at 100 the tombstone goes.
        let (_, metrics) = decide(&rules(false), &[del(1, 8)], &[up(1, 7, Some(1), None)], 100);
        assert_eq!(metrics.tombstones_collected, 1);
    }

    #[test]
    fn an_upsert_older_than_the_collected_horizon_for_a_key_without_state_is_held_back() {
        let (rows, metrics) = decide(
            &rules(false),
            &[gc_horizon(8)],
            &[up(1, 7, Some(1), None)],
            0,
        );
        assert!(rows.is_empty(), "{rows:?}");
        assert_eq!(metrics.late_after_gc, 1);
        let (rows, metrics) = decide(
            &rules(false),
            &[gc_horizon(8)],
            &[up(1, 9, Some(1), None)],
            0,
        );
        assert_eq!(
            (rows, metrics.late_after_gc),
            (vec![vec![Some(1), Some(1), None]], 0)
        );
    }

    #[test]
    fn late_events_are_counted_applied_or_dropped() {
        let stored = [up(1, 5, Some(5), None)];
        let (_, scd1) = decide(&rules(false), &stored, &[up(1, 3, Some(3), None)], 0);
        let (_, scd2) = decide(&rules(true), &stored, &[up(1, 3, Some(3), None)], 0);
        assert_eq!((scd1.late_dropped, scd1.late_applied), (1, 0));
        assert_eq!((scd2.late_dropped, scd2.late_applied), (0, 1));
    }
}
