//! Aggregations over a watermarked stream, as Spark Structured Streaming runs them in
//! append mode: a GROUP BY (or SELECT DISTINCT) whose keys hold the watermarked event
//! time, as the column itself, a `window()` or a `session_window()` over it. The state of
//! each group is kept across batches and the group's row appended once, when the
//! watermark passes its event time (a window's end). [`analyze`] finds the flow's
//! stateful operator (such an aggregation, or a join of two watermarked streams:
//! `crate::stream_join`) and says what it computes; it refuses, with Spark's error
//! class, what Spark refuses (an aggregation without a watermarked key, a DISTINCT
//! aggregate, sorting, window functions over a stream, an unbounded outer join) and what
//! cdcflow does not run yet. docs/semantics.md, "Stateful streaming", states the rules.

use cdcflow_sql::watermark::Watermark;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Column, DFSchemaRef, JoinType};
use datafusion::logical_expr::{Aggregate, Distinct, Expr, LogicalPlan, LogicalPlanBuilder};

use crate::functions::time_window::{SESSION_WINDOW, TimeWindow, WINDOW, session_gap};
use crate::stateful::Stateful;
use crate::stream_dedup::{self, StreamDedup};
use crate::stream_join::{self, JoinRefusal, StreamJoin};

/// A stateful aggregation over a watermarked stream.
#[derive(Debug, Clone)]
pub struct StreamAggregate {
    /// The aggregation as DataFusion planned it (a DISTINCT as a GROUP BY of every
    /// column). Its output replaces the node in the flow's plan.
    pub aggregate: Aggregate,
    /// The group key that holds the event time, and how.
    pub event_time: EventTimeKey,
    /// One per aggregate expression, in order.
    pub functions: Vec<StreamFunction>,
    /// The WATERMARK clause the event time comes from.
    pub watermark: Watermark,
    /// The event-time column in the aggregation's input.
    pub event_column: Column,
    /// The plan node replaced: the Aggregate, or the Distinct planned as one.
    pub node: LogicalPlan,
}

/// Which group key bounds the state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventTimeKey {
    /// Its position among the group expressions.
    pub index: usize,
    /// `window(ts, …)`: a group closes at the window's end; `None`: the key is the
    /// event time itself, and a group closes at it.
    pub window: Option<TimeWindow>,
    /// `session_window(ts, gap)`: a row opens the session `[ts, ts + gap)`, sessions of a
    /// key that meet merge, and a session closes at its end.
    pub session_gap: Option<i64>,
}

impl EventTimeKey {
    /// Whether the key is a window (time or session), kept as its two bounds.
    pub fn is_window(&self) -> bool {
        self.window.is_some() || self.session_gap.is_some()
    }
}

/// An aggregate function the state can hold: each has a state that merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

#[derive(Debug, Clone)]
pub struct StreamFunction {
    pub function: Function,
    /// The argument; `None` counts rows (`count(*)`, `count(1)`).
    pub arg: Option<Expr>,
    /// The type of the result, as the plan has it.
    pub output: DataType,
}

/// A form refused over a stream, with Spark's error class where Spark refuses it too.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// Spark's error class, when Spark refuses the form as well.
    pub class: Option<&'static str>,
    /// What the query does, as a predicate: "aggregates a stream without …".
    pub message: String,
    pub help: String,
    /// Where the query writes it, to be located in the SQL.
    pub at: Stateful,
}

impl Refusal {
    fn spark(
        class: &'static str,
        message: impl Into<String>,
        help: impl Into<String>,
        at: Stateful,
    ) -> Self {
        Self {
            class: Some(class),
            message: message.into(),
            help: help.into(),
            at,
        }
    }

    pub(crate) fn ours(message: impl Into<String>, help: impl Into<String>, at: Stateful) -> Self {
        Self {
            class: None,
            message: message.into(),
            help: help.into(),
            at,
        }
    }

    /// The diagnostic's message about `what` (`streaming table `x``).
    pub fn describe(&self, what: &str) -> String {
        match self.class {
            Some(class) => format!("[{class}] {what} {}", self.message),
            None => format!("{what} {}", self.message),
        }
    }
}

/// The operator of a flow that keeps state across batches.
#[derive(Debug, Clone)]
pub enum StatefulOp {
    Aggregate(Box<StreamAggregate>),
    Join(Box<StreamJoin>),
    Dedup(Box<StreamDedup>),
}

impl StatefulOp {
    /// The plan node the operator replaces.
    pub fn node(&self) -> &LogicalPlan {
        match self {
            Self::Aggregate(sa) => &sa.node,
            Self::Join(sj) => &sj.node,
            Self::Dedup(sd) => &sd.node,
        }
    }
}

/// The stateful operator of `plan` over a stream (`streaming` tells which scanned
/// tables are), if it has one that can run.
pub fn analyze(
    plan: &LogicalPlan,
    watermarks: &[Watermark],
    streaming: &dyn Fn(&str) -> bool,
) -> Result<Option<StatefulOp>, Refusal> {
    let mut found: Vec<LogicalPlan> = Vec::new();
    check(plan, streaming, &mut found)?;
    let Some(node) = found.first() else {
        return Ok(None);
    };
    if found.len() > 1 {
        return Err(Refusal::ours(
            "keeps state in two operators over a stream (an aggregation over an aggregation, or over a join of two streams): not run yet",
            "keep one stateful operator per streaming table: aggregate or join into one, and aggregate that table in a MATERIALIZED VIEW or another flow",
            Stateful::GroupBy(None),
        ));
    }
    if let LogicalPlan::Distinct(Distinct::On(d)) = node {
        return stream_dedup::analyze(node, d, watermarks)
            .map(|d| Some(StatefulOp::Dedup(Box::new(d))));
    }
    if let LogicalPlan::Join(_) = node {
        return match stream_join::analyze(node, watermarks) {
            Ok(j) => Ok(Some(StatefulOp::Join(Box::new(j)))),
            Err(refused) => Err(join_refusal(node, refused)),
        };
    }
    let aggregate = match node {
        LogicalPlan::Aggregate(a) => a.clone(),
        LogicalPlan::Distinct(Distinct::All(input)) => {
            let columns: Vec<Expr> = input
                .schema()
                .columns()
                .into_iter()
                .map(Expr::Column)
                .collect();
            match LogicalPlanBuilder::from(input.as_ref().clone())
                .aggregate(columns, Vec::<Expr>::new())
                .and_then(|b| b.build())
            {
                Ok(LogicalPlan::Aggregate(a)) => a,
                _ => unreachable!("an aggregate of columns plans"),
            }
        }
        _ => unreachable!("check() collects aggregations"),
    };
    let at = match node {
        LogicalPlan::Distinct(_) => Stateful::Distinct,
        _ => Stateful::GroupBy(aggregate.aggr_expr.first().and_then(function_name)),
    };
    let no_watermark = || {
        Refusal::spark(
            "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION",
            match at {
                Stateful::Distinct => {
                    "applies DISTINCT to a stream without a watermarked event time among its columns: in append mode a row is written once, when the watermark passes its event time, and nothing would pass these"
                }
                _ => {
                    "aggregates a stream without a watermark on a grouping event time: in append mode a group is written once, when the watermark closes it, and nothing would close these"
                }
            },
            "put a WATERMARK on the stream and group by its event time or a window over it: FROM STREAM(src) WATERMARK ts DELAY OF INTERVAL 10 MINUTES AS s … GROUP BY window(ts, '1 minute'), …; or define the table as a MATERIALIZED VIEW, recomputed from its whole input",
            at.clone(),
        )
    };
    let mut event_time = None;
    for (index, g) in aggregate.group_expr.iter().enumerate() {
        let g = unalias(g);
        let (column, window, session_gap) = match g {
            Expr::Column(c) => (c, None, None),
            Expr::ScalarFunction(f) if f.func.name() == WINDOW => match f.args.first().map(unalias)
            {
                Some(Expr::Column(c)) => {
                    let shape = TimeWindow::of_args(&f.args[1..]).map_err(|e| {
                        Refusal::ours(
                            format!("groups a stream by a window it cannot compute: {e}"),
                            "write the window's durations as literals: window(ts, '10 minutes'), window(ts, '10 minutes', '5 minutes')",
                            at.clone(),
                        )
                    })?;
                    (c, Some(shape), None)
                }
                _ => continue,
            },
            Expr::ScalarFunction(f) if f.func.name() == SESSION_WINDOW => {
                match f.args.first().map(unalias) {
                    Some(Expr::Column(c)) => {
                        let gap = session_gap(&f.args[1..]).map_err(|e| {
                        Refusal::ours(
                            format!("groups a stream by a session window it cannot compute: {e}"),
                            "write the gap as a literal duration: session_window(ts, '5 minutes')",
                            at.clone(),
                        )
                    })?;
                        (c, None, Some(gap))
                    }
                    _ => continue,
                }
            }
            Expr::GroupingSet(_) => {
                return Err(Refusal::ours(
                    "groups a stream by GROUPING SETS, CUBE or ROLLUP: not run yet",
                    "aggregate the streaming table in a MATERIALIZED VIEW",
                    at,
                ));
            }
            _ => continue,
        };
        if event_time.is_some() {
            continue;
        }
        if let Some(w) = watermarks
            .iter()
            .find(|w| is_event_time(&aggregate.input, column, w))
        {
            event_time = Some((
                EventTimeKey {
                    index,
                    window,
                    session_gap,
                },
                w.clone(),
                column.clone(),
            ));
        }
    }
    let Some((event_time, watermark, event_column)) = event_time else {
        return Err(no_watermark());
    };
    if watermarks.len() > 1 {
        return Err(Refusal::ours(
            "aggregates several watermarked streams at once: not run yet",
            "aggregate one watermarked stream per flow",
            at,
        ));
    }
    let functions = aggregate
        .aggr_expr
        .iter()
        .zip(
            aggregate
                .schema
                .fields()
                .iter()
                .skip(aggregate.group_expr.len()),
        )
        .map(|(e, field)| stream_function(e, field.data_type(), &at))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(StatefulOp::Aggregate(Box::new(StreamAggregate {
        aggregate,
        event_time,
        functions,
        watermark,
        event_column,
        node: node.clone(),
    }))))
}

/// Why a join of two streams cannot run, as Spark says it where Spark refuses it.
fn join_refusal(node: &LogicalPlan, refused: JoinRefusal) -> Refusal {
    let join_type = match node {
        LogicalPlan::Join(j) => j.join_type,
        _ => JoinType::Inner,
    };
    let spark_name = match join_type {
        JoinType::Left => "LeftOuter",
        JoinType::Right => "RightOuter",
        JoinType::Full => "FullOuter",
        _ => "Inner",
    };
    let bound = "bound both event times in ON, with a WATERMARK on each stream: ON i.id = c.id AND c.t2 >= i.t1 AND c.t2 <= i.t1 + INTERVAL 2 MINUTES";
    match (join_type, refused) {
        (JoinType::Inner, JoinRefusal::NoWatermark) => Refusal::ours(
            "joins two streams without a WATERMARK on each one's event time: its state would never shrink (Spark keeps it whole; cdcflow does not run such a join)",
            bound,
            Stateful::StreamJoin,
        ),
        (JoinType::Left | JoinType::Right | JoinType::Full, _) => Refusal::spark(
            "_LEGACY_ERROR_TEMP_3102",
            format!(
                "joins two streams ({spark_name}) without a watermark on both sides and a range condition on their event times: Spark does not support it, since an unmatched row could never be written"
            ),
            bound,
            Stateful::StreamJoin,
        ),
        _ => Refusal::ours(
            format!(
                "joins two streams ({spark_name}): only inner and outer joins of two streams run"
            ),
            "use an inner, left, right or full outer join",
            Stateful::StreamJoin,
        ),
    }
}

fn unalias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unalias(&a.expr),
        _ => e,
    }
}

fn function_name(e: &Expr) -> Option<String> {
    match unalias(e) {
        Expr::AggregateFunction(f) => Some(f.func.name().to_string()),
        _ => None,
    }
}

fn stream_function(e: &Expr, output: &DataType, at: &Stateful) -> Result<StreamFunction, Refusal> {
    let Expr::AggregateFunction(f) = unalias(e) else {
        return Err(Refusal::ours(
            format!(
                "aggregates a stream with `{e}`, which is not an aggregate function whose state is kept"
            ),
            "over a stream use count, sum, min, max or avg",
            at.clone(),
        ));
    };
    let name = f.func.name().to_ascii_lowercase();
    let at = Stateful::Aggregate(f.func.name().to_string());
    if f.params.distinct {
        return Err(Refusal::spark(
            "_LEGACY_ERROR_TEMP_3102",
            format!(
                "aggregates a stream with a DISTINCT aggregate (`{name}(DISTINCT …)`): distinct aggregations are not supported on streams"
            ),
            "count distinct values in a MATERIALIZED VIEW over the streaming table, or count the rows of a SELECT DISTINCT stream",
            at,
        ));
    }
    if f.params.filter.is_some() || !f.params.order_by.is_empty() {
        return Err(Refusal::ours(
            format!("aggregates a stream with `{name}` and a FILTER or ORDER BY: not run yet"),
            "filter the rows in WHERE instead",
            at,
        ));
    }
    let function = match name.as_str() {
        "count" => Function::Count,
        "sum" => Function::Sum,
        "min" => Function::Min,
        "max" => Function::Max,
        "avg" | "mean" => Function::Avg,
        _ => {
            return Err(Refusal::ours(
                format!(
                    "aggregates a stream with `{name}`, whose state is not kept across batches yet"
                ),
                "over a stream use count, sum, min, max or avg; other aggregates belong in a MATERIALIZED VIEW over the streaming table",
                at,
            ));
        }
    };
    if function == Function::Avg && matches!(output, DataType::Decimal256(..)) {
        return Err(Refusal::ours(
            "averages a DECIMAL of more than 38 digits over a stream: not run yet",
            "cast the argument to DECIMAL(38, s) or DOUBLE",
            at,
        ));
    }
    let arg = match f.params.args.as_slice() {
        [] => None,
        [Expr::Literal(v, _)] if function == Function::Count && !v.is_null() => None,
        [a] => Some(a.clone()),
        _ => {
            return Err(Refusal::ours(
                format!("aggregates a stream with `{name}` of several arguments: not run yet"),
                "aggregate one expression",
                at,
            ));
        }
    };
    Ok(StreamFunction {
        function,
        arg,
        output: output.clone(),
    })
}

/// Collects the aggregations over a stream in `plan`; refuses the operators that
/// cannot run over one. Returns whether `plan`'s output is a stream.
fn check(
    plan: &LogicalPlan,
    streaming: &dyn Fn(&str) -> bool,
    found: &mut Vec<LogicalPlan>,
) -> Result<bool, Refusal> {
    if let LogicalPlan::TableScan(scan) = plan {
        return Ok(streaming(scan.table_name.table()));
    }
    let inputs = plan
        .inputs()
        .into_iter()
        .map(|p| check(p, streaming, found))
        .collect::<Result<Vec<bool>, _>>()?;
    let stream = inputs.iter().any(|s| *s);
    if !stream {
        return Ok(false);
    }
    match plan {
        LogicalPlan::Aggregate(_) | LogicalPlan::Distinct(_) => {
            found.push(plan.clone());
            // What follows reads the aggregation's (or deduplication's) appended rows.
        }
        LogicalPlan::Window(w) => {
            let name = w
                .window_expr
                .first()
                .and_then(|e| match unalias(e) {
                    Expr::WindowFunction(f) => Some(f.fun.name().to_string()),
                    _ => None,
                })
                .unwrap_or_default();
            return Err(Refusal::spark(
                "NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING",
                format!(
                    "applies window function `{name}` to a stream: a stream supports only time windows (GROUP BY window(…))"
                ),
                "aggregate by time with GROUP BY window(ts, '10 minutes') over a watermarked stream, or compute ranks and lags in a MATERIALIZED VIEW over the streaming table",
                Stateful::Window(name),
            ));
        }
        LogicalPlan::Sort(_) => {
            return Err(Refusal::spark(
                "_LEGACY_ERROR_TEMP_3102",
                "sorts a stream (ORDER BY): a streaming table appends each batch's rows, in no order",
                "order the rows when reading them (cdcflow query … ORDER BY), or in a MATERIALIZED VIEW",
                Stateful::Sort,
            ));
        }
        LogicalPlan::Limit(_) => {
            return Err(Refusal::ours(
                "limits a stream (LIMIT): the count would run across batches (Spark keeps it in state), and cdcflow keeps no such count",
                "filter the rows with WHERE, or limit a MATERIALIZED VIEW over the streaming table",
                Stateful::Limit,
            ));
        }
        LogicalPlan::Join(_) if inputs.iter().all(|s| *s) => {
            // What follows reads the join's appended rows.
            found.push(plan.clone());
        }
        _ => {}
    }
    Ok(true)
}

/// Whether `column` of `plan`'s output is the event time of `watermark`: the column of
/// its from item, carried unchanged through projections, filters and aliases.
pub fn is_event_time(plan: &LogicalPlan, column: &Column, watermark: &Watermark) -> bool {
    let Ok(i) = plan.schema().index_of_column(column) else {
        return false;
    };
    traces(plan, i, watermark)
}

fn traces(plan: &LogicalPlan, i: usize, w: &Watermark) -> bool {
    match plan {
        LogicalPlan::SubqueryAlias(sa) => {
            let (_, field) = sa.schema.qualified_field(i);
            if sa.alias.table().eq_ignore_ascii_case(&w.alias) {
                return field.name().eq_ignore_ascii_case(&w.column);
            }
            traces(&sa.input, i, w)
        }
        LogicalPlan::Projection(p) => match p.expr.get(i).map(unalias) {
            Some(Expr::Column(c)) => is_event_time(&p.input, c, w),
            _ => false,
        },
        LogicalPlan::Filter(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::Repartition(_)
        | LogicalPlan::Distinct(Distinct::All(_)) => traces(plan.inputs()[0], i, w),
        _ => false,
    }
}

/// The type of `watermark`'s event time in `plan`, found at its from item; `None` when
/// the from item or the column is not there.
pub fn event_time_type(plan: &LogicalPlan, watermark: &Watermark) -> Option<DataType> {
    let mut out = None;
    visit_aliases(plan, &mut |schema: &DFSchemaRef, alias: &str| {
        if out.is_none() && alias.eq_ignore_ascii_case(&watermark.alias) {
            out = schema
                .fields()
                .iter()
                .find(|f| f.name().eq_ignore_ascii_case(&watermark.column))
                .map(|f| f.data_type().clone());
        }
    });
    out
}

fn visit_aliases(plan: &LogicalPlan, f: &mut dyn FnMut(&DFSchemaRef, &str)) {
    if let LogicalPlan::SubqueryAlias(sa) = plan {
        f(&sa.schema, sa.alias.table());
    }
    for input in plan.inputs() {
        visit_aliases(input, f);
    }
}
