//! Joins of two watermarked streams, as Spark's `StreamingSymmetricHashJoinExec` runs
//! them: each side's rows are kept in state, each new row meets the other side's kept
//! and new rows, and a kept row leaves the state once the watermark rules out any
//! later match, which the join condition's time bounds tell ([`TimeBounds`]). An outer
//! join appends a kept row that never matched, with nulls, when it leaves.
//! [`analyze`] finds such a join in a flow's plan; `crate::stream_aggregate::analyze`
//! refuses what cannot run. docs/semantics.md, "Stateful streaming", states the rules.

use cdcflow_sql::watermark::Watermark;
use datafusion::common::{Column, JoinType, ScalarValue};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, Join, LogicalPlan, Operator};

use crate::stream_aggregate::is_event_time;

/// A join of two watermarked streams.
#[derive(Debug, Clone)]
pub struct StreamJoin {
    pub join: Join,
    /// The plan node replaced by the join's appended rows.
    pub node: LogicalPlan,
    pub left: JoinSide,
    pub right: JoinSide,
    /// What `right − left` (event times) may be, from the join condition.
    pub bounds: TimeBounds,
}

/// One side of the join.
#[derive(Debug, Clone)]
pub struct JoinSide {
    pub watermark: Watermark,
    /// The event-time column in this side's input.
    pub event_column: Column,
}

/// The range the join condition allows `right − left` (microseconds), each bound
/// optional: `c.t2 >= i.t1 AND c.t2 <= i.t1 + INTERVAL 2 MINUTES` is `[0, 2 min]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TimeBounds {
    pub lower: Option<i64>,
    pub upper: Option<i64>,
}

impl TimeBounds {
    /// Whether a kept left row at `t` can still match a right row to come: later
    /// right rows are after `watermark`, and match only up to `t + upper`. Spark keeps
    /// a row whose last possible match is at the watermark itself one batch longer.
    pub fn left_may_match(&self, t: i64, watermark: i64) -> bool {
        self.upper.is_none_or(|u| t.saturating_add(u) >= watermark)
    }

    /// As [`TimeBounds::left_may_match`], for a kept right row: later left rows are
    /// after the watermark and match only from `t − lower` down.
    pub fn right_may_match(&self, t: i64, watermark: i64) -> bool {
        self.lower.is_none_or(|l| t.saturating_sub(l) >= watermark)
    }
}

/// Why a join of two streams cannot run.
#[derive(Debug, Clone, PartialEq)]
pub enum JoinRefusal {
    /// A side has no watermark on an event time it outputs.
    NoWatermark,
    /// An outer join whose condition does not bound the time of the side it keeps.
    Unbounded,
}

/// The join of two streams `node`, when both sides carry a watermark; the refusal
/// when it cannot run.
pub fn analyze(node: &LogicalPlan, watermarks: &[Watermark]) -> Result<StreamJoin, JoinRefusal> {
    let LogicalPlan::Join(join) = node else {
        return Err(JoinRefusal::NoWatermark);
    };
    let side = |plan: &LogicalPlan| -> Option<JoinSide> {
        for w in watermarks {
            for c in plan.schema().columns() {
                if is_event_time(plan, &c, w) {
                    return Some(JoinSide {
                        watermark: w.clone(),
                        event_column: c,
                    });
                }
            }
        }
        None
    };
    let (Some(left), Some(right)) = (side(&join.left), side(&join.right)) else {
        return Err(JoinRefusal::NoWatermark);
    };
    let mut conjuncts: Vec<Expr> = join
        .on
        .iter()
        .map(|(l, r)| l.clone().eq(r.clone()))
        .collect();
    if let Some(f) = &join.filter {
        conjuncts.extend(split_conjunction(f).into_iter().cloned());
    }
    let mut bounds = TimeBounds::default();
    for c in &conjuncts {
        for (op, l, r) in comparisons(c) {
            if let Some((lower, upper)) = bound(op, l, r, &left.event_column, &right.event_column) {
                if let Some(lo) = lower {
                    bounds.lower = Some(bounds.lower.map_or(lo, |b: i64| b.max(lo)));
                }
                if let Some(hi) = upper {
                    bounds.upper = Some(bounds.upper.map_or(hi, |b: i64| b.min(hi)));
                }
            }
        }
    }
    let needs_upper = matches!(join.join_type, JoinType::Left | JoinType::Full);
    let needs_lower = matches!(join.join_type, JoinType::Right | JoinType::Full);
    if (needs_upper && bounds.upper.is_none()) || (needs_lower && bounds.lower.is_none()) {
        return Err(JoinRefusal::Unbounded);
    }
    Ok(StreamJoin {
        join: join.clone(),
        node: node.clone(),
        left,
        right,
        bounds,
    })
}

/// The comparisons a conjunct makes: itself, or a BETWEEN's two.
fn comparisons(e: &Expr) -> Vec<(Operator, &Expr, &Expr)> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(
                op,
                Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq | Operator::Eq
            ) =>
        {
            vec![(*op, left.as_ref(), right.as_ref())]
        }
        Expr::Between(b) if !b.negated => vec![
            (Operator::GtEq, b.expr.as_ref(), b.low.as_ref()),
            (Operator::LtEq, b.expr.as_ref(), b.high.as_ref()),
        ],
        _ => vec![],
    }
}

/// `column ± literal interval`, as the column and its offset in microseconds.
fn shifted(e: &Expr) -> Option<(&Column, i64)> {
    match e {
        Expr::Column(c) => Some((c, 0)),
        Expr::Cast(c) => shifted(&c.expr),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (c, base) = shifted(left)?;
            let Expr::Literal(v, _) = right.as_ref() else {
                return None;
            };
            let d = interval_micros(v)?;
            match op {
                Operator::Plus => Some((c, base + d)),
                Operator::Minus => Some((c, base - d)),
                _ => None,
            }
        }
        _ => None,
    }
}

fn interval_micros(v: &ScalarValue) -> Option<i64> {
    match v {
        ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            Some(i64::from(i.days) * 86_400_000_000 + i.nanoseconds / 1_000)
        }
        ScalarValue::IntervalDayTime(Some(i)) => {
            Some(i64::from(i.days) * 86_400_000_000 + i64::from(i.milliseconds) * 1_000)
        }
        _ => None,
    }
}

/// The bounds on `right − left` that `l op r` sets, when it compares the two event
/// times (each perhaps shifted by an interval).
fn bound(
    op: Operator,
    l: &Expr,
    r: &Expr,
    left: &Column,
    right: &Column,
) -> Option<(Option<i64>, Option<i64>)> {
    let (a, da) = shifted(l)?;
    let (b, db) = shifted(r)?;
    let same =
        |x: &Column, y: &Column| x.name.eq_ignore_ascii_case(&y.name) && x.relation == y.relation;
    // Written as `R + da op L + db`, i.e. `R − L op db − da`; or the other way round.
    let (op, value) = if same(a, right) && same(b, left) {
        (op, db - da)
    } else if same(a, left) && same(b, right) {
        // `L + da op R + db` is `R − L op' da − db` with the comparison turned.
        let turned = match op {
            Operator::Lt => Operator::Gt,
            Operator::LtEq => Operator::GtEq,
            Operator::Gt => Operator::Lt,
            Operator::GtEq => Operator::LtEq,
            other => other,
        };
        (turned, da - db)
    } else {
        return None;
    };
    Some(match op {
        Operator::Gt | Operator::GtEq => (Some(value), None),
        Operator::Lt | Operator::LtEq => (None, Some(value)),
        Operator::Eq => (Some(value), Some(value)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_row_leaves_once_no_later_row_of_the_other_side_can_match() {
        let b = TimeBounds {
            lower: Some(0),
            upper: Some(120),
        };
        // Left at 10 matches right rows up to 130; later right rows are after 130.
        assert!(b.left_may_match(10, 130));
        assert!(!b.left_may_match(10, 131));
        // Right at 50 matches left rows from 50 down; later left rows are after 50.
        assert!(b.right_may_match(50, 50));
        assert!(!b.right_may_match(50, 51));
        let unbounded = TimeBounds::default();
        assert!(unbounded.left_may_match(0, i64::MAX));
    }
}
