//! A `read_files` source read when its query runs, and only the files its filters on
//! `_metadata` keep. A snapshot flow that takes each version from a folder of many
//! (`WHERE _metadata.file_path = (SELECT version.path FROM current_snapshot_version())`)
//! so reads one file, not the folder. The filters come as DataFusion pushes them down:
//! a filter over `_metadata` alone is evaluated on each file's `_metadata` before the
//! file is opened (and again on the rows, as the filter is inexact); the scalar
//! subquery has been folded to its value first (`cdc::snapshot`), as Spark evaluates
//! an uncorrelated scalar subquery before the query that uses it.
//!
//! Files are read as `register_files` reads them (settled, quarantine, `_metadata`);
//! a file that cannot be read whole fails the scan, for a snapshot lacking its rows
//! would delete them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cdcflow_plan::file_metadata;
use cdcflow_plan::read_files::ReadFiles;
use datafusion::arrow::array::{Array, BooleanArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{and_kleene, concat_batches};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::create_physical_expr;
use datafusion::physical_plan::ExecutionPlan;

use super::{BatchInputs, read_listed};
use crate::RunError;
use crate::landing::{FileName, Stamp};

/// A `read_files` call whose query reads `_metadata`, with the files it lists.
#[derive(Debug)]
pub(crate) struct FilesTable {
    pub read: ReadFiles,
    /// The files' schema.
    pub schema: SchemaRef,
    /// With `_metadata`.
    pub read_schema: SchemaRef,
    pub files: Vec<(PathBuf, FileName)>,
    pub settle: Duration,
}

fn external(e: RunError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Whether `filter` reads nothing but `_metadata` (and no subquery, which a file's
/// `_metadata` alone cannot evaluate).
fn on_metadata(filter: &Expr) -> bool {
    let columns = filter.column_refs();
    let subquery = filter
        .exists(|e| {
            Ok(matches!(
                e,
                Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
            ))
        })
        .unwrap_or(true);
    !subquery && !columns.is_empty() && columns.iter().all(|c| c.name == file_metadata::COLUMN)
}

impl FilesTable {
    /// The files whose `_metadata` every filter over `_metadata` keeps.
    fn kept(&self, filters: &[Expr]) -> Result<Vec<(PathBuf, FileName)>> {
        let filters: Vec<&Expr> = filters.iter().filter(|f| on_metadata(f)).collect();
        if filters.is_empty() || self.files.is_empty() {
            return Ok(self.files.clone());
        }
        let metadata = self.metadata()?;
        let schema = DFSchema::try_from(metadata.schema())?;
        let mut keep = BooleanArray::from(vec![true; metadata.num_rows()]);
        for filter in filters {
            // The filter is inexact: the rows are filtered again after the scan. A filter
            // that cannot be evaluated on `_metadata` alone therefore keeps every file
            // rather than failing the read.
            match kept_by(filter, &metadata, &schema) {
                Ok(value) => keep = and_kleene(&keep, &value)?,
                Err(e) => tracing::debug!("read_files: filter {filter} keeps every file: {e}"),
            }
        }
        Ok(self
            .files
            .iter()
            .zip(keep.iter())
            .filter(|(_, k)| *k == Some(true))
            .map(|(f, _)| f.clone())
            .collect())
    }

    /// One row per file: its `_metadata` as now.
    fn metadata(&self) -> Result<RecordBatch> {
        let schema = file_metadata::with_column(&Schema::empty());
        let one_row = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let mut rows = Vec::with_capacity(self.files.len());
        for (path, _) in &self.files {
            let stamp = Stamp::of(path).map_err(|e| external(RunError::io(path, e)))?;
            rows.extend(
                crate::file_metadata::attach(vec![one_row.clone()], (path, None), &stamp, &schema)
                    .map_err(external)?,
            );
        }
        Ok(concat_batches(&schema, &rows)?)
    }
}

/// Which of `metadata`'s files (one row each) `filter` keeps.
fn kept_by(filter: &Expr, metadata: &RecordBatch, schema: &DFSchema) -> Result<BooleanArray> {
    let unqualified = filter
        .clone()
        .transform(|e| match e {
            Expr::Column(c) => Ok(Transformed::yes(Expr::Column(Column::new_unqualified(
                c.name,
            )))),
            e => Ok(Transformed::no(e)),
        })?
        .data;
    let expr = create_physical_expr(
        &unqualified,
        schema,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )?;
    let value = expr.evaluate(metadata)?.into_array(metadata.num_rows())?;
    Ok(value
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| DataFusionError::Internal("a filter that is not boolean".into()))?
        .clone())
}

#[async_trait::async_trait]
impl TableProvider for FilesTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.read_schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| match on_metadata(f) {
                true => TableProviderFilterPushDown::Inexact,
                false => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let files = self.kept(filters)?;
        let mut inputs = BatchInputs::new(0);
        let (rows, _) = read_listed(
            &self.read,
            &self.schema,
            &self.read_schema,
            files,
            self.settle,
            &mut inputs,
        )
        .await
        .map_err(external)?;
        if !inputs.quarantine.is_empty() {
            return Err(external(crate::quarantine::malformed(&inputs.quarantine)));
        }
        if let Some(error) = inputs.unread() {
            return Err(external(error));
        }
        Ok(MemorySourceConfig::try_new_exec(
            &[rows],
            Arc::clone(&self.read_schema),
            projection.cloned(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cdcflow_plan::read_files::FileFormat;
    use datafusion::arrow::datatypes::DataType;
    use datafusion::functions::core::expr_fn::get_field;
    use datafusion::prelude::{cast, col, lit};

    use super::*;

    fn table(dir: &std::path::Path, names: &[&str]) -> FilesTable {
        let read = ReadFiles {
            table: "files".into(),
            path_text: dir.display().to_string(),
            path: dir.to_path_buf(),
            format: FileFormat::Csv,
            declared_schema: None,
            options: BTreeMap::new(),
            streaming: false,
            auto_loader: false,
            schema_hints: None,
            inferred_schema: None,
            metadata: true,
            landing: true,
            span: datafusion::sql::sqlparser::tokenizer::Span::empty(),
        };
        let files = names
            .iter()
            .map(|name| {
                let path = dir.join(name);
                std::fs::write(&path, "id\n1\n").expect("a test file");
                let name = FileName::of(&read, &path);
                (path, name)
            })
            .collect();
        let schema = Arc::new(Schema::new(vec![datafusion::arrow::datatypes::Field::new(
            "id",
            DataType::Int64,
            true,
        )]));
        FilesTable {
            read,
            read_schema: file_metadata::with_column(&schema),
            schema,
            files,
            settle: Duration::ZERO,
        }
    }

    fn names(files: &[(PathBuf, FileName)]) -> Vec<String> {
        files
            .iter()
            .filter_map(|(p, _)| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn filters_on_metadata_keep_their_files_and_one_that_fails_keeps_every_file() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let table = table(dir.path(), &["a.csv", "b.csv"]);
        let name = || get_field(col(file_metadata::COLUMN), "file_name");
        let one = name().eq(lit("b.csv"));
        assert_eq!(
            names(&table.kept(std::slice::from_ref(&one)).expect("kept")),
            ["b.csv"]
        );
        // `a.csv` is no number: the cast fails on the listing, so this filter keeps
        // every file and only the other one prunes.
        let failing = cast(name(), DataType::Int64).gt(lit(0_i64));
        assert!(
            kept_by(
                &failing,
                &table.metadata().expect("metadata"),
                &DFSchema::empty()
            )
            .is_err()
        );
        assert_eq!(
            names(&table.kept(std::slice::from_ref(&failing)).expect("kept")),
            ["a.csv", "b.csv"]
        );
        assert_eq!(
            names(&table.kept(&[failing, one]).expect("kept")),
            ["b.csv"]
        );
    }
}
