//! [`AutoCdcCodec`]: the AUTO CDC execution plans as bytes and back, so that a flow's
//! physical plan can be sent to another process, as a distributed DataFusion engine
//! (Ballista, datafusion-distributed) sends plans to its executors (docs/scale-out.md).
//! DataFusion's own nodes below them (projection, filter, the scan) are datafusion-proto's;
//! this codec adds cdcflow's own: the events and the apply (the rules, the tables'
//! folders and what their commits record), the scan of a batch's source rows (the rows
//! as an Arrow IPC stream) and a first batch's key-group scan (the source files, their
//! deletion vectors and log entries, and the grouping), as JSON with Arrow types as IPC
//! schemas.

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cdcflow_plan::location::Location;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use serde::{Deserialize, Serialize};

use super::{
    ApplyTarget, AutoCdcApplyExec, AutoCdcCommitExec, AutoCdcEventsExec, AutoCdcRouteExec,
    EventChecks, KeyGroupsExec, Parts, SourceRowsExec,
};
use crate::cdc::engine::{GroupedLoad, Grouping};
use crate::cdc::kernel::Rules;
use crate::delta::{Commit, DataFile};

/// Encodes and decodes [`AutoCdcEventsExec`], [`AutoCdcApplyExec`], [`SourceRowsExec`],
/// [`KeyGroupsExec`], and a split batch's [`AutoCdcRouteExec`] and [`AutoCdcCommitExec`].
#[derive(Debug, Default)]
pub struct AutoCdcCodec;

/// One node on the wire.
#[derive(Serialize, Deserialize)]
enum Wire {
    Events {
        rules: RulesWire,
        source: String,
        sequence: Vec<(String, Vec<u8>)>,
        now_micros: i64,
        parts: Parts,
    },
    Apply {
        target: TargetWire,
        parts: Parts,
    },
    /// The commit of a batch applied in slices.
    Commit {
        target: TargetWire,
        slices: usize,
    },
    /// The route values of a batch's slices.
    Route {
        keys: Vec<usize>,
        routes: Vec<u32>,
    },
    /// The batch's source rows: an Arrow IPC stream, sent as raw bytes after the JSON
    /// (as JSON numbers it would be four times its size, and slow to write and read).
    SourceRows {
        projection: Option<Vec<usize>>,
    },
    KeyGroups {
        files: Vec<FileWire>,
        groups: usize,
        rows: u64,
        source: Vec<u8>,
        keys: Vec<usize>,
        grouping: Grouping,
        projection: Option<Vec<usize>>,
    },
}

/// An [`ApplyTarget`] on the wire: the tables a run opened are opened again there, at
/// the versions the batch was planned on when they were pinned.
#[derive(Serialize, Deserialize)]
struct TargetWire {
    rules: RulesWire,
    name: String,
    state_at: LocationWire,
    public_at: LocationWire,
    state_commit: Box<Commit>,
    public_commit: Box<Commit>,
    now_micros: i64,
    #[serde(default)]
    versions: Option<(i64, i64)>,
}

impl TargetWire {
    fn of(t: &ApplyTarget) -> Result<Self> {
        Ok(Self {
            rules: RulesWire::of(&t.rules)?,
            name: t.name.clone(),
            state_at: LocationWire::of(&t.state_at),
            public_at: LocationWire::of(&t.public_at),
            state_commit: Box::new(t.state_commit.clone()),
            public_commit: Box::new(t.public_commit.clone()),
            now_micros: t.now_micros,
            versions: t.versions,
        })
    }

    fn target(self) -> Result<Arc<ApplyTarget>> {
        Ok(Arc::new(ApplyTarget {
            rules: Arc::new(self.rules.rules()?),
            name: self.name,
            state_at: self.state_at.location()?,
            public_at: self.public_at.location()?,
            state_commit: *self.state_commit,
            public_commit: *self.public_commit,
            now_micros: self.now_micros,
            opened: Mutex::new(None),
            slices: 1,
            versions: self.versions,
        }))
    }
}

/// A table's place on the wire: a folder, or an object-store URL.
#[derive(Serialize, Deserialize)]
enum LocationWire {
    Local(PathBuf),
    Remote(String),
}

impl LocationWire {
    /// A folder by its absolute path: the process that decodes it may run elsewhere.
    fn of(at: &Location) -> Self {
        match at {
            Location::Local(dir) => {
                Self::Local(std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
            }
            Location::Remote(url) => Self::Remote(url.to_string()),
        }
    }

    fn location(self) -> Result<Location> {
        match self {
            Self::Local(dir) => Ok(Location::Local(dir)),
            Self::Remote(url) => url::Url::parse(&url)
                .map(Location::Remote)
                .map_err(|e| DataFusionError::Internal(format!("table URL `{url}`: {e}"))),
        }
    }
}

/// A source file of a [`GroupedLoad`] on the wire: the name messages give it, its path,
/// the rows its deletion vector removes (as the vector's own bytes) and its log entry.
#[derive(Serialize, Deserialize)]
struct FileWire {
    origin: String,
    path: PathBuf,
    deleted: Option<Vec<u8>>,
    add: Option<deltalake::kernel::Add>,
}

impl FileWire {
    fn of((origin, file): &(String, DataFile)) -> Result<Self> {
        let deleted = match &file.deleted {
            Some(d) => {
                let mut bytes = Vec::new();
                d.serialize_into(&mut bytes)?;
                Some(bytes)
            }
            None => None,
        };
        Ok(Self {
            origin: origin.clone(),
            path: file.path.clone(),
            deleted,
            add: file.add.clone(),
        })
    }

    fn file(self) -> Result<(String, DataFile)> {
        let deleted = match self.deleted {
            Some(bytes) => Some(Arc::new(roaring::RoaringTreemap::deserialize_from(
                bytes.as_slice(),
            )?)),
            None => None,
        };
        let file = DataFile {
            path: self.path,
            deleted,
            add: self.add,
            remote: None,
        };
        Ok((self.origin, file))
    }
}

/// [`Rules`] on the wire.
#[derive(Serialize, Deserialize)]
struct RulesWire {
    columns: Vec<u8>,
    keys: Vec<usize>,
    scd2: bool,
    tracked: Vec<usize>,
    ignore_null: Vec<usize>,
    sequence_type: Vec<u8>,
    tombstone_retention_micros: i64,
    min_shared_rows: usize,
}

impl RulesWire {
    fn of(rules: &Rules) -> Result<Self> {
        if !rules.generated.is_empty() {
            // Their expressions are planned against the target's declared columns;
            // sending them needs datafusion-proto's expression encoding (a later step).
            return Err(DataFusionError::NotImplemented(
                "an AUTO CDC target with generated columns cannot be sent to another process yet"
                    .into(),
            ));
        }
        Ok(Self {
            columns: schema_bytes(&rules.columns)?,
            keys: rules.keys.clone(),
            scd2: rules.scd2,
            tracked: rules.tracked.clone(),
            ignore_null: rules.ignore_null.clone(),
            sequence_type: type_bytes(&rules.sequence_type)?,
            tombstone_retention_micros: rules.tombstone_retention_micros,
            min_shared_rows: rules.min_shared_rows,
        })
    }

    fn rules(self) -> Result<Rules> {
        Ok(Rules {
            columns: schema_of(&self.columns)?,
            keys: self.keys,
            scd2: self.scd2,
            tracked: self.tracked,
            ignore_null: self.ignore_null,
            sequence_type: type_of(&self.sequence_type)?,
            tombstone_retention_micros: self.tombstone_retention_micros,
            min_shared_rows: self.min_shared_rows,
            generated: vec![],
        })
    }
}

impl PhysicalExtensionCodec for AutoCdcCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (json, tail) = split_frame(buf)?;
        let wire: Wire = serde_json::from_slice(json)
            .map_err(|e| DataFusionError::Internal(format!("an AUTO CDC plan node: {e}")))?;
        let input = || match inputs {
            [input] => Ok(Arc::clone(input)),
            _ => Err(DataFusionError::Internal(
                "an AUTO CDC events or apply plan has one input".into(),
            )),
        };
        Ok(match wire {
            Wire::Events {
                rules,
                source,
                sequence,
                now_micros,
                parts,
            } => {
                let sequence = sequence
                    .into_iter()
                    .map(|(name, t)| Ok((name, type_of(&t)?)))
                    .collect::<Result<_>>()?;
                let checks = EventChecks {
                    rules: Arc::new(rules.rules()?),
                    source,
                    sequence,
                    now_micros,
                };
                Arc::new(AutoCdcEventsExec::new(input()?, Arc::new(checks), parts))
            }
            Wire::Apply { target, parts } => {
                Arc::new(AutoCdcApplyExec::new(input()?, target.target()?, parts))
            }
            Wire::Commit { target, slices } => {
                Arc::new(AutoCdcCommitExec::new(input()?, target.target()?, slices))
            }
            Wire::Route { keys, routes } => Arc::new(AutoCdcRouteExec::new(input()?, keys, routes)),
            Wire::SourceRows { projection } => {
                let reader = StreamReader::try_new(Cursor::new(tail), None)?;
                let schema = reader.schema();
                let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
                Arc::new(SourceRowsExec::new(schema, batches, projection)?)
            }
            Wire::KeyGroups {
                files,
                groups,
                rows,
                source,
                keys,
                grouping,
                projection,
            } => {
                let load = GroupedLoad {
                    files: files
                        .into_iter()
                        .map(FileWire::file)
                        .collect::<Result<_>>()?,
                    groups,
                    rows,
                    source: schema_of(&source)?,
                    keys,
                    grouping,
                };
                Arc::new(KeyGroupsExec::new(Arc::new(load), projection)?)
            }
        })
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let mut tail = Vec::new();
        let wire = if let Some(events) = node.downcast_ref::<AutoCdcEventsExec>() {
            let checks = events.checks();
            Wire::Events {
                rules: RulesWire::of(&checks.rules)?,
                source: checks.source.clone(),
                sequence: checks
                    .sequence
                    .iter()
                    .map(|(name, t)| Ok((name.clone(), type_bytes(t)?)))
                    .collect::<Result<_>>()?,
                now_micros: checks.now_micros,
                parts: events.parts(),
            }
        } else if let Some(apply) = node.downcast_ref::<AutoCdcApplyExec>() {
            Wire::Apply {
                target: TargetWire::of(apply.target())?,
                parts: apply.parts(),
            }
        } else if let Some(commit) = node.downcast_ref::<AutoCdcCommitExec>() {
            Wire::Commit {
                target: TargetWire::of(commit.target())?,
                slices: commit.slices(),
            }
        } else if let Some(route) = node.downcast_ref::<AutoCdcRouteExec>() {
            Wire::Route {
                keys: route.keys().to_vec(),
                routes: route.routes().to_vec(),
            }
        } else if let Some(scan) = node.downcast_ref::<SourceRowsExec>() {
            let rows = scan.unread().ok_or_else(|| {
                DataFusionError::Internal(
                    "a batch's source rows were read already: its plan cannot be sent".into(),
                )
            })?;
            let mut writer = StreamWriter::try_new(&mut tail, scan.rows_schema())?;
            for b in &rows {
                writer.write(b)?;
            }
            writer.finish()?;
            drop(writer);
            Wire::SourceRows {
                projection: scan.projection().cloned(),
            }
        } else if let Some(scan) = node.downcast_ref::<KeyGroupsExec>() {
            let load = scan.load();
            Wire::KeyGroups {
                files: load.files.iter().map(FileWire::of).collect::<Result<_>>()?,
                groups: load.groups,
                rows: load.rows,
                source: schema_bytes(&load.source)?,
                keys: load.keys.clone(),
                grouping: load.grouping.clone(),
                projection: scan.projection().cloned(),
            }
        } else {
            return Err(DataFusionError::NotImplemented(format!(
                "{} is not an AUTO CDC execution plan",
                node.name()
            )));
        };
        let json = serde_json::to_vec(&wire)
            .map_err(|e| DataFusionError::Internal(format!("an AUTO CDC plan node: {e}")))?;
        let len = u32::try_from(json.len())
            .map_err(|_| DataFusionError::Internal("an AUTO CDC plan node over 4 GiB".into()))?;
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(&json);
        buf.extend_from_slice(&tail);
        Ok(())
    }
}

/// A node's bytes as its JSON and the raw bytes after it: a little-endian `u32` length,
/// the JSON, then the rest (a batch's source rows; nothing for other nodes).
fn split_frame(buf: &[u8]) -> Result<(&[u8], &[u8])> {
    let bad = || DataFusionError::Internal("an AUTO CDC plan node cut short".into());
    let (len, rest) = buf.split_first_chunk::<4>().ok_or_else(bad)?;
    let len = usize::try_from(u32::from_le_bytes(*len)).map_err(|_| bad())?;
    if rest.len() < len {
        return Err(bad());
    }
    Ok(rest.split_at(len))
}

/// A schema as an Arrow IPC stream without batches.
fn schema_bytes(schema: &Schema) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    StreamWriter::try_new(&mut buf, schema)?.finish()?;
    Ok(buf)
}

fn schema_of(bytes: &[u8]) -> Result<SchemaRef> {
    Ok(StreamReader::try_new(Cursor::new(bytes), None)?.schema())
}

/// A type as the schema of one field.
fn type_bytes(t: &DataType) -> Result<Vec<u8>> {
    schema_bytes(&Schema::new(vec![Field::new("t", t.clone(), true)]))
}

fn type_of(bytes: &[u8]) -> Result<DataType> {
    let schema = schema_of(bytes)?;
    schema
        .fields()
        .first()
        .map(|f| f.data_type().clone())
        .ok_or_else(|| DataFusionError::Internal("an encoded type without its field".into()))
}
