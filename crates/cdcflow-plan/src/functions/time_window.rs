//! Spark's time windows: `window(ts, width[, slide[, start]])` gives the window
//! `STRUCT<start, end>` a timestamp falls in (start inclusive, end exclusive, aligned
//! to the epoch plus `start`), and `window_time(window)` its last instant (`end` − 1 µs).
//!
//! Durations are strings (`'10 minutes'`, `'1 hour 30 minutes'`) or interval literals,
//! in microseconds; months are refused, as Spark refuses them in windows. A sliding
//! window (`slide` < `width`) puts a row in several windows: the call itself gives the
//! last of them (the one starting latest), and the stateful aggregation over a stream
//! expands each row into all of them ([`TimeWindow::windows`]), as Spark's
//! `TimeWindowing` rule does.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StructArray, TimestampMicrosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Fields, Int64Type, TimeUnit};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    vec![
        Arc::new(ScalarUDF::new_from_impl(Window::new())),
        Arc::new(ScalarUDF::new_from_impl(SessionWindow::new())),
        Arc::new(ScalarUDF::new_from_impl(WindowTime::new())),
    ]
}

/// The function's name, as the stateful planner finds it in a GROUP BY.
pub const WINDOW: &str = "window";
/// `session_window(ts, gap)`: the session `[ts, ts + gap)` a row opens; sessions of a
/// key that meet merge in a stateful aggregation (`stream_aggregate`).
pub const SESSION_WINDOW: &str = "session_window";

/// The gap of a `session_window`'s literal arguments after the timestamp, microseconds.
pub fn session_gap(args: &[Expr]) -> std::result::Result<i64, String> {
    let [gap] = args else {
        return Err(
            "session_window() takes a timestamp and a gap: session_window(ts, '5 minutes')".into(),
        );
    };
    if let Some(text) = literal_text(gap)
        && ["month", "year"]
            .iter()
            .any(|m| text.to_ascii_lowercase().contains(m))
    {
        return Err(format!(
            "the gap '{text}' is in months or years, which differ in length"
        ));
    }
    match duration_of_expr(gap) {
        Some(g) if g > 0 => Ok(g),
        Some(_) => Err("the gap must be positive".into()),
        None => Err(format!(
            "the gap `{gap}` is not a literal duration such as '5 minutes'"
        )),
    }
}

/// A window's shape, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindow {
    pub width: i64,
    pub slide: i64,
    pub start: i64,
}

impl TimeWindow {
    /// The shape the literal arguments after the timestamp give (`'1 minute'`, …).
    pub fn of_args(args: &[Expr]) -> std::result::Result<Self, String> {
        let value = |i: usize, what: &str| -> std::result::Result<Option<i64>, String> {
            let Some(e) = args.get(i) else {
                return Ok(None);
            };
            if let Some(text) = literal_text(e)
                && ["month", "year"]
                    .iter()
                    .any(|m| text.to_ascii_lowercase().contains(m))
            {
                return Err(format!(
                    "the window's {what} '{text}' is in months or years, which differ in length (Spark refuses them in windows too)"
                ));
            }
            duration_of_expr(e).map(Some).ok_or_else(|| {
                let shown = literal_text(e).map_or_else(|| e.to_string(), |t| format!("'{t}'"));
                format!(
                    "the window's {what} {shown} is not a literal duration such as '10 minutes'"
                )
            })
        };
        let width = value(0, "width")?.ok_or("window() needs a width: window(ts, '10 minutes')")?;
        let slide = value(1, "slide")?.unwrap_or(width);
        let start = value(2, "start")?.unwrap_or(0);
        if args.len() > 3 {
            return Err(
                "window() takes at most 4 arguments: window(ts, width[, slide[, start]])".into(),
            );
        }
        if width <= 0 || slide <= 0 {
            return Err("the window's width and slide must be positive".into());
        }
        if slide > width {
            return Err(format!(
                "the window's slide ({slide} µs) must not exceed its width ({width} µs)"
            ));
        }
        if start.abs() >= slide {
            return Err("the window's start must be less than its slide".into());
        }
        Ok(Self {
            width,
            slide,
            start,
        })
    }

    pub fn is_tumbling(&self) -> bool {
        self.width == self.slide
    }

    /// The windows holding `ts`, latest first, as Spark numbers them.
    pub fn windows(&self, ts: i64) -> impl Iterator<Item = (i64, i64)> + '_ {
        let overlapping = (self.width + self.slide - 1) / self.slide;
        let remainder = (ts - self.start).rem_euclid(self.slide);
        let last_start = ts - remainder;
        (0..overlapping)
            .map(move |i| {
                let s = last_start - i * self.slide;
                (s, s + self.width)
            })
            .filter(move |&(s, e)| s <= ts && ts < e)
    }
}

/// The text of a string literal.
fn literal_text(e: &Expr) -> Option<String> {
    match e {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
            _,
        ) => Some(s.clone()),
        Expr::Cast(c) => literal_text(&c.expr),
        Expr::Alias(a) => literal_text(&a.expr),
        _ => None,
    }
}

/// A literal duration: a string Spark reads as an interval, or an interval literal.
fn duration_of_expr(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(v, _) => duration_of_scalar(v),
        Expr::Cast(c) => duration_of_expr(&c.expr),
        Expr::Alias(a) => duration_of_expr(&a.expr),
        _ => None,
    }
}

fn duration_of_scalar(v: &ScalarValue) -> Option<i64> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => cdcflow_sql::watermark::duration_micros(s),
        ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            Some(i.days as i64 * 86_400_000_000 + i.nanoseconds / 1_000)
        }
        ScalarValue::IntervalDayTime(Some(i)) => {
            Some(i.days as i64 * 86_400_000_000 + i.milliseconds as i64 * 1_000)
        }
        _ => None,
    }
}

const MICROS: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

/// The window struct for timestamps of type `ts` (its zone kept).
pub fn window_type(ts: &DataType) -> DataType {
    let t = match ts {
        DataType::Timestamp(_, tz) => DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
        _ => MICROS,
    };
    DataType::Struct(window_fields(&t))
}

fn window_fields(t: &DataType) -> Fields {
    Fields::from(vec![
        Field::new("start", t.clone(), true),
        Field::new("end", t.clone(), true),
    ])
}

/// A column of windows from their bounds, of type [`window_type`]`(ts)`.
pub fn window_array(ts: &DataType, bounds: &[Option<(i64, i64)>]) -> Result<ArrayRef> {
    let DataType::Struct(fields) = window_type(ts) else {
        unreachable!("a struct")
    };
    let tz = match ts {
        DataType::Timestamp(_, tz) => tz.clone(),
        _ => None,
    };
    let starts = TimestampMicrosecondArray::from_iter(bounds.iter().map(|b| b.map(|b| b.0)))
        .with_timezone_opt(tz.clone());
    let ends = TimestampMicrosecondArray::from_iter(bounds.iter().map(|b| b.map(|b| b.1)))
        .with_timezone_opt(tz);
    let nulls =
        datafusion::arrow::buffer::NullBuffer::from_iter(bounds.iter().map(Option::is_some));
    Ok(Arc::new(StructArray::try_new(
        fields,
        vec![Arc::new(starts), Arc::new(ends)],
        Some(nulls),
    )?))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Window {
    signature: Signature,
}

impl Window {
    fn new() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Window {
    fn name(&self) -> &str {
        WINDOW
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let Some(ts) = args.first() else {
            return plan_err!("window() needs a timestamp and a width: window(ts, '10 minutes')");
        };
        let ts = match ts {
            DataType::Timestamp(_, tz) => DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
            DataType::Null => MICROS,
            other => {
                return plan_err!("window() takes a TIMESTAMP as its first argument, not {other}");
            }
        };
        let mut out = vec![ts];
        out.extend(args[1..].iter().cloned());
        Ok(out)
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(window_type(&args[0]))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let shape = shape_of(&args.args[1..])?;
        let ts_type = args.args[0].data_type();
        let ts = cast(&args.args[0].to_array(args.number_rows)?, &DataType::Int64)?;
        let ts = ts.as_primitive::<Int64Type>();
        let bounds: Vec<Option<(i64, i64)>> = (0..ts.len())
            .map(|i| {
                ts.is_valid(i)
                    .then(|| shape.windows(ts.value(i)).next())
                    .flatten()
            })
            .collect();
        super::columnar(window_array(&ts_type, &bounds)?, &args.args)
    }
}

/// The window's shape from the evaluated literal arguments.
fn shape_of(args: &[ColumnarValue]) -> Result<TimeWindow> {
    let exprs = args
        .iter()
        .map(|a| match a {
            ColumnarValue::Scalar(v) => Ok(Expr::Literal(v.clone(), None)),
            ColumnarValue::Array(_) => exec_err!("window()'s durations must be literals"),
        })
        .collect::<Result<Vec<_>>>()?;
    TimeWindow::of_args(&exprs).or_else(|e| exec_err!("{e}"))
}

/// `session_window(ts, gap)` of one row: `[ts, ts + gap)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionWindow {
    signature: Signature,
}

impl SessionWindow {
    fn new() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SessionWindow {
    fn name(&self) -> &str {
        SESSION_WINDOW
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        Window::new().coerce_types(args)
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(window_type(&args[0]))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let gap = args.args[1..]
            .iter()
            .map(|a| match a {
                ColumnarValue::Scalar(v) => Ok(Expr::Literal(v.clone(), None)),
                ColumnarValue::Array(_) => exec_err!("session_window()'s gap must be a literal"),
            })
            .collect::<Result<Vec<_>>>()?;
        let gap = session_gap(&gap).or_else(|e| exec_err!("{e}"))?;
        let ts_type = args.args[0].data_type();
        let ts = cast(&args.args[0].to_array(args.number_rows)?, &DataType::Int64)?;
        let ts = ts.as_primitive::<Int64Type>();
        let bounds: Vec<Option<(i64, i64)>> = ts.iter().map(|t| t.map(|t| (t, t + gap))).collect();
        super::columnar(window_array(&ts_type, &bounds)?, &args.args)
    }
}

/// `window_time(window)`: the window's last instant, `end` − 1 µs.
#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowTime {
    signature: Signature,
}

impl WindowTime {
    fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for WindowTime {
    fn name(&self) -> &str {
        "window_time"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match &args[0] {
            DataType::Struct(f) if f.len() == 2 && f[1].name() == "end" => {
                Ok(f[1].data_type().clone())
            }
            other => {
                plan_err!("window_time() takes a window (the result of window()), not {other}")
            }
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let windows = args.args[0].to_array(args.number_rows)?;
        let Some(windows) = windows.as_any().downcast_ref::<StructArray>() else {
            return exec_err!("window_time() takes a window");
        };
        let end = windows.column(1);
        let tz = match end.data_type() {
            DataType::Timestamp(_, tz) => tz.clone(),
            _ => None,
        };
        let end = cast(end, &DataType::Int64)?;
        let end = end.as_primitive::<Int64Type>();
        let out = TimestampMicrosecondArray::from_iter(
            (0..end.len())
                .map(|i| (windows.is_valid(i) && end.is_valid(i)).then(|| end.value(i) - 1)),
        )
        .with_timezone_opt(tz);
        super::columnar(Arc::new(out), &args.args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::lit;

    #[test]
    fn tumbling_and_sliding_windows_hold_the_timestamp() {
        let minute = 60_000_000;
        let w = TimeWindow::of_args(&[lit("1 minute")]).unwrap();
        assert!(w.is_tumbling());
        assert_eq!(
            w.windows(90_000_000).collect::<Vec<_>>(),
            vec![(minute, 2 * minute)]
        );
        // Before the epoch: aligned downwards.
        assert_eq!(w.windows(-1).collect::<Vec<_>>(), vec![(-minute, 0)]);
        let s = TimeWindow::of_args(&[lit("1 minute"), lit("30 seconds")]).unwrap();
        assert_eq!(
            s.windows(90_000_000).collect::<Vec<_>>(),
            vec![(90_000_000, 150_000_000), (60_000_000, 120_000_000)]
        );
        // A width that is not a multiple of the slide: only windows holding the time.
        let odd = TimeWindow::of_args(&[lit("50 seconds"), lit("20 seconds")]).unwrap();
        assert_eq!(
            odd.windows(45_000_000).collect::<Vec<_>>(),
            vec![
                (40_000_000, 90_000_000),
                (20_000_000, 70_000_000),
                (0, 50_000_000)
            ]
        );
        assert_eq!(
            odd.windows(55_000_000).collect::<Vec<_>>(),
            vec![(40_000_000, 90_000_000), (20_000_000, 70_000_000)]
        );
        let started =
            TimeWindow::of_args(&[lit("1 minute"), lit("1 minute"), lit("15 seconds")]).unwrap();
        assert_eq!(
            started.windows(10_000_000).collect::<Vec<_>>(),
            vec![(-45_000_000, 15_000_000)]
        );
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(TimeWindow::of_args(&[lit("1 month")]).is_err());
        assert!(TimeWindow::of_args(&[lit("1 minute"), lit("2 minutes")]).is_err());
        assert!(TimeWindow::of_args(&[lit("soon")]).is_err());
    }
}
