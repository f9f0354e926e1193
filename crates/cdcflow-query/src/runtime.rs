//! `read_query` behind the runtime's source interface ([`cdcflow_runtime::sources`]):
//! the connection of pipeline.yaml (PostgreSQL, or MySQL and MariaDB), the query, its
//! watermark and keys; a read takes a batch of the rows after the checkpoint's position
//! ([`crate::page`]) and commits only when there are new ones. Nothing is
//! acknowledged: the checkpoint alone holds the position.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use cdcflow_plan::connections::ConnectionKind;
use cdcflow_plan::read_query::ReadQuery;
use cdcflow_plan::{Input, Pipeline};
use cdcflow_postgres::types::TextColumn;
use cdcflow_postgres::{PgConnection, PgError};
use cdcflow_runtime::sources::{ExternalSource, SourceFactory, SourceRead, SourceStatus};
use cdcflow_runtime::{ErrorCode, RunError};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use futures::future::BoxFuture;
use serde_json::Value;

use crate::dialect::Dialect;
use crate::order::{Column, Order};
use crate::page::{Batch, PageError, Read};
use crate::position::Position;
use crate::watermark::{self, Kind, Watermark};
use cdcflow_mysql::{MysqlConnection, MysqlError};

/// An error of a `read_query` source, with what to do.
#[derive(Debug)]
pub struct SourceError {
    message: String,
    help: String,
    /// The server could not be reached: a later attempt may succeed.
    unreachable: bool,
}

/// SQLSTATE classes of a server that refuses the session rather than a statement:
/// connection, authorization, catalog name, resources, operator intervention.
const SESSION_CLASSES: [&str; 5] = ["08", "28", "3D", "53", "57"];

/// What to do about a query the server refused.
pub const QUERY_HELP: &str = "check the query of read_query: the server runs it as written, inside SELECT * FROM (…) AS cdcflow_q (the message says what it refused)";

impl SourceError {
    pub fn new(message: String, help: &str) -> Self {
        Self {
            message,
            help: help.into(),
            unreachable: false,
        }
    }

    /// As [`Self::new`], for a server that could not be reached.
    pub fn unreachable(message: String, help: &str) -> Self {
        Self {
            unreachable: true,
            ..Self::new(message, help)
        }
    }

    pub fn postgres(e: &PgError) -> Self {
        let help = e.help().unwrap_or_default().to_string();
        Self {
            message: e.to_string(),
            help,
            unreachable: e.unreachable(),
        }
    }

    /// An error of running the user's query: a statement the server refused is the
    /// query's (its syntax, a missing column, a privilege), named as such.
    pub fn postgres_query(e: &PgError) -> Self {
        let refused = e
            .sqlstate()
            .is_some_and(|s| !SESSION_CLASSES.iter().any(|c| s.starts_with(c)));
        match refused {
            true => Self::new(e.to_string(), QUERY_HELP),
            false => Self::postgres(e),
        }
    }

    fn into_run_error(self, connection: &str) -> RunError {
        let code = match self.unreachable {
            true => ErrorCode::SourceUnreachable,
            false => ErrorCode::Source,
        };
        RunError::user(
            code,
            format!("read_query on connection `{connection}`: {}", self.message),
        )
        .with_help(self.help)
    }
}

impl From<MysqlError> for SourceError {
    fn from(e: MysqlError) -> Self {
        Self {
            message: e.message,
            help: e.help,
            unreachable: e.unreachable,
        }
    }
}

/// Opens `read_query` inputs.
#[derive(Debug, Default, Clone, Copy)]
pub struct QuerySources;

impl SourceFactory for QuerySources {
    fn open(
        &self,
        pipeline: &Pipeline,
        input: &Input,
    ) -> Option<Result<Box<dyn ExternalSource>, RunError>> {
        let Input::Query(rq) = input else {
            return None;
        };
        Some(open(pipeline, rq).map(|s| Box::new(s) as Box<dyn ExternalSource>))
    }
}

/// The server a query runs on.
#[derive(Debug, Clone)]
enum Server {
    Postgres(PgConnection),
    Mysql(MysqlConnection),
}

fn open(pipeline: &Pipeline, rq: &ReadQuery) -> Result<QuerySource, RunError> {
    let connection = cdcflow_postgres::runtime::declared(pipeline, &rq.connection)?;
    let server = match connection.kind {
        ConnectionKind::Postgres => Server::Postgres(cdcflow_postgres::runtime::resolve(
            &rq.connection,
            connection,
        )?),
        ConnectionKind::Mysql => Server::Mysql(cdcflow_mysql::resolve(&rq.connection, connection)?),
    };
    Ok(QuerySource {
        rq: rq.clone(),
        server,
    })
}

struct QuerySource {
    rq: ReadQuery,
    server: Server,
}

impl QuerySource {
    fn error(&self, e: SourceError) -> RunError {
        e.into_run_error(&self.rq.connection)
    }

    fn dialect(&self) -> Dialect {
        match self.server {
            Server::Postgres(_) => Dialect::Postgres,
            Server::Mysql(_) => Dialect::Mysql,
        }
    }

    async fn describe(&self) -> Result<Vec<(String, DataType)>, SourceError> {
        match &self.server {
            Server::Postgres(c) => crate::postgres::describe(c, &self.rq.query).await,
            Server::Mysql(c) => crate::mysql::describe(c, &self.rq.query).await,
        }
    }

    async fn fetch(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, SourceError> {
        match &self.server {
            Server::Postgres(c) => crate::postgres::fetch(c, sql).await,
            Server::Mysql(c) => crate::mysql::fetch(c, sql).await,
        }
    }

    async fn now_micros(&self) -> Result<i64, SourceError> {
        match &self.server {
            Server::Postgres(c) => crate::postgres::now_micros(c).await,
            Server::Mysql(c) => crate::mysql::now_micros(c).await,
        }
    }

    /// The result's columns and the watermark's place among them.
    async fn columns_and_watermark(&self) -> Result<(Vec<(String, DataType)>, usize), RunError> {
        let columns = self.describe().await.map_err(|e| self.error(e))?;
        let place = self.place(
            &columns,
            &self.rq.watermark,
            "watermark => names a column of the query's result whose value only grows",
        )?;
        Ok((columns, place))
    }

    /// The place of column `name` among `columns`: its exact name, else the one that
    /// differs in case only.
    fn place(
        &self,
        columns: &[(String, DataType)],
        name: &str,
        help: &str,
    ) -> Result<usize, RunError> {
        columns
            .iter()
            .position(|(c, _)| c == name)
            .or_else(|| columns.iter().position(|(c, _)| c.eq_ignore_ascii_case(name)))
            .ok_or_else(|| {
                RunError::input(format!(
                    "read_query on connection `{}`: the query's result has no column `{name}` (its columns: {})",
                    self.rq.connection,
                    columns.iter().map(|c| c.0.as_str()).collect::<Vec<_>>().join(", ")
                ))
                .with_help(help)
            })
    }

    /// A page the batch cannot take, as the user's error.
    fn page_error(&self, e: PageError, order: &Order) -> RunError {
        match e {
            PageError::KeysNotUnique(place) => RunError::input(format!(
                "read_query on connection `{}`: two rows have the same watermark and keys ({}): {}",
                self.rq.connection,
                order.names().join(", "),
                place
                    .iter()
                    .map(|v| v.as_deref().unwrap_or("NULL"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .with_help("keys => names columns that tell apart the rows with one watermark value (the result's primary key); without keys =>, every column of the result orders them"),
            PageError::Shape { values, expected } => RunError::input(format!(
                "read_query on connection `{}`: the server returned a row of {values} values, not the {expected} of the query's columns and the read's order",
                self.rq.connection
            )),
        }
    }

    async fn read_rows(&self, after: Option<&Value>) -> Result<SourceRead, RunError> {
        let position = match after {
            None => Position::default(),
            Some(v) => Position::parse(v).ok_or_else(|| {
                RunError::input(format!("the checkpoint's read_query position `{v}` cannot be read"))
                    .with_help("run `cdcflow run --full-refresh <table>` to read the query again from the start")
            })?,
        };
        let (columns, place) = self.columns_and_watermark().await?;
        let keys = self
            .rq
            .keys
            .iter()
            .map(|k| self.place(&columns, k, "keys => names columns of the query's result"))
            .collect::<Result<Vec<_>, _>>()?;
        let column = |i: usize| Column {
            name: &columns[i].0,
            numeric: columns[i].1.is_numeric(),
        };
        let kind = Kind::of(&columns[place].1);
        let dialect = self.dialect();
        let read = Read {
            dialect,
            query: &self.rq.query,
            watermark: Watermark {
                kind,
                overlap_seconds: self.rq.overlap_seconds,
            },
            column: place,
            columns: columns.len(),
            order: Order::new(
                dialect,
                column(place),
                &keys.iter().map(|&k| column(k)).collect::<Vec<_>>(),
                &(0..columns.len()).map(column).collect::<Vec<_>>(),
            ),
            keyed: !keys.is_empty(),
            max_rows: self.rq.max_rows_per_batch,
        };
        let mut batch = Batch::start(&read, position);
        loop {
            let page = self.fetch(&batch.sql()).await.map_err(|e| self.error(e))?;
            match batch.take(page) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return Err(self.page_error(e, &read.order)),
            }
        }
        let taken = batch.finish();
        let oldest = match kind {
            Kind::Time => taken
                .rows
                .iter()
                .filter_map(|r| r.get(place).cloned().flatten())
                .filter_map(|t| watermark::time_micros(&t))
                .min(),
            Kind::Number | Kind::Other => None,
        };
        let schema: SchemaRef = Arc::new(Schema::new(
            columns
                .iter()
                .map(|(name, t)| Field::new(name, t.clone(), true))
                .collect::<Vec<_>>(),
        ));
        let mut texts = vec![TextColumn::default(); columns.len()];
        for row in taken.rows {
            for (column, value) in texts.iter_mut().zip(row) {
                column.values.push(value);
            }
        }
        let arrays = texts
            .into_iter()
            .zip(&columns)
            .map(|(t, (name, data_type))| t.finish(name, data_type))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error(SourceError::postgres(&e)))?;
        let rows = RecordBatch::try_new(Arc::clone(&schema), arrays)
            .map_err(|e| RunError::input(format!("read_query: {e}")))?;
        Ok(SourceRead {
            schema,
            rows: vec![rows],
            position: taken.position.to_json(),
            must_commit: taken.must_commit,
            more: taken.more,
            oldest_change_micros: oldest,
            tombstones: 0,
            lag: vec![],
            acknowledge: None,
            carried: None,
            rejected: vec![],
            warnings: vec![],
            defaults: vec![],
        })
    }
}

impl ExternalSource for QuerySource {
    fn checkpoint_key(&self) -> String {
        self.rq.key()
    }

    fn columns(&self) -> BoxFuture<'_, Result<SchemaRef, RunError>> {
        Box::pin(async move {
            let (columns, _) = self.columns_and_watermark().await?;
            Ok(Arc::new(Schema::new(
                columns
                    .into_iter()
                    .map(|(name, t)| Field::new(name, t, true))
                    .collect::<Vec<_>>(),
            )))
        })
    }

    fn read<'a>(&'a self, after: Option<&'a Value>) -> BoxFuture<'a, Result<SourceRead, RunError>> {
        Box::pin(self.read_rows(after))
    }

    fn status<'a>(
        &'a self,
        after: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<SourceStatus, RunError>> {
        Box::pin(async move {
            let mut status = SourceStatus {
                source: self.rq.key(),
                ..SourceStatus::default()
            };
            let high = after
                .and_then(Position::parse)
                .and_then(|p| p.watermark)
                .and_then(|w| watermark::time_micros(&w));
            if let Some(high) = high {
                let now = self.now_micros().await.map_err(|e| self.error(e))?;
                status.lag_seconds = Some((now - high).max(0) as f64 / 1e6);
            }
            Ok(status)
        })
    }
}
