//! The initial copy of a table without a primary key, in chunks of its physical place:
//! tuple ids (`ctid`), read with TID range scans (PostgreSQL 14 and later; an older
//! server answers the same queries by scanning the whole table for each chunk).
//!
//! A chunk takes the rows after the last tuple the previous chunk took, in `ctid` order,
//! at most a batch of them, up to the table's size in pages when the copy began. Like a
//! chunk of a primary key, each is read in a snapshot of its own (exported by a slot, at
//! a known WAL position) and is one batch, so a crash at any chunk resumes after the
//! last committed one. What moves between two chunks' snapshots is in the change
//! stream, which starts at the first chunk's point:
//! - an updated row may move to a page already copied (the stream's update brings it)
//!   or to a page not yet copied (copied again, at a later position: the same values,
//!   which `SEQUENCE BY` orders after the update);
//! - a row inserted after the copy began is past its pages, or is brought by the stream.
//!
//! Only a rewrite of the whole table moves rows without a change in the stream
//! (`VACUUM FULL`, `CLUSTER`, a `TRUNCATE`, a type change): it gives the table a new
//! file (`pg_relation_filenode`), which the copy keeps, and a copy that finds a new
//! file starts again from the first page (at a later position again, so nothing is
//! lost and every row copied twice sorts after its earlier copy).

use std::fmt;

use tokio_postgres::Client;

use crate::changes::{ChangeMeta, ChangeRows};
use crate::connection::quote_literal;
use crate::copy_text::copy_rows;
use crate::error::PgError;
use crate::snapshot::{CopyProgress, one_number};

/// Rows per page the first window assumes when the server has no statistics.
const ROWS_PER_PAGE_UNKNOWN: u64 = 50;

/// A tuple's place: page and line pointer (offsets start at 1, so `(p,0)` is just
/// before the page's first tuple).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Tid {
    pub page: u32,
    pub offset: u16,
}

impl Tid {
    /// Just before page `page`'s first tuple.
    pub fn page_start(page: u32) -> Self {
        Self { page, offset: 0 }
    }
}

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", self.page, self.offset)
    }
}

impl std::str::FromStr for Tid {
    type Err = String;

    /// As PostgreSQL prints a `tid`: `(12,40)`.
    fn from_str(text: &str) -> Result<Self, String> {
        let inner = text
            .strip_prefix('(')
            .and_then(|t| t.strip_suffix(')'))
            .ok_or_else(|| format!("`{text}` is not a tuple id"))?;
        let (page, offset) = inner
            .split_once(',')
            .ok_or_else(|| format!("`{text}` is not a tuple id"))?;
        Ok(Self {
            page: page
                .trim()
                .parse()
                .map_err(|_| format!("`{text}` is not a tuple id"))?,
            offset: offset
                .trim()
                .parse()
                .map_err(|_| format!("`{text}` is not a tuple id"))?,
        })
    }
}

/// Where a copy by tuple id stands between two chunks (kept in the checkpoint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TupleResume {
    /// The rows after this tuple are still to be copied.
    pub after: Tid,
    /// The table's size in pages when the copy began: every row of its first snapshot
    /// lies before it.
    pub pages: u32,
    /// The table's file when the copy began; another one means it was rewritten.
    pub filenode: u32,
    /// Rows copied so far.
    pub copied: u64,
}

/// The table's file and its size in pages, now.
async fn file_and_pages(client: &Client, table: &str) -> Result<(u32, u32), PgError> {
    let table = quote_literal(table);
    let filenode = one_number(
        client,
        &format!("SELECT pg_relation_filenode({table}::regclass)::bigint::text"),
    )
    .await?;
    let pages = one_number(
        client,
        &format!(
            "SELECT (pg_relation_size({table}::regclass) / current_setting('block_size')::bigint)::text"
        ),
    )
    .await?;
    let number = |n: Option<i64>, what: &str| {
        n.and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
            PgError::Protocol(format!("the server gave no {what} for table {table}"))
        })
    };
    Ok((number(filenode, "file")?, number(pages, "size")?))
}

/// How many pages the first window spans to hold about `limit` rows, from the
/// statistics of the table (`reltuples` / `relpages`).
async fn first_window(client: &Client, table: &str, limit: u64) -> Result<u64, PgError> {
    let per_page = one_number(
        client,
        &format!(
            "SELECT CASE WHEN relpages > 0 AND reltuples > 0 THEN ceil(reltuples / relpages)::bigint END::text FROM pg_class WHERE oid = {}::regclass",
            quote_literal(table)
        ),
    )
    .await?
    .and_then(|n| u64::try_from(n).ok())
    .filter(|n| *n > 0)
    .unwrap_or(ROWS_PER_PAGE_UNKNOWN);
    Ok(limit.div_ceil(per_page).max(1))
}

/// Copies the next chunk of `table` (SQL, quoted) after `resume` (`None`: from the
/// start) into `rows`: at most `limit` rows, inside the open snapshot transaction.
/// `list` is the columns' SQL.
pub(crate) async fn copy_chunk(
    client: &Client,
    rows: &mut ChangeRows,
    (table, list): (&str, &str),
    resume: Option<&TupleResume>,
    meta: ChangeMeta,
    limit: u64,
) -> Result<CopyProgress, PgError> {
    let (filenode, pages_now) = file_and_pages(client, table).await?;
    let resume = match resume {
        Some(r) if r.filenode == filenode => r.clone(),
        other => {
            if other.is_some() {
                tracing::warn!(%table, "the table was rewritten (VACUUM FULL, CLUSTER, TRUNCATE or a type change) while it was being copied: its copy starts again");
            }
            TupleResume {
                after: Tid::default(),
                pages: pages_now,
                filenode,
                copied: other.map_or(0, |r| r.copied),
            }
        }
    };
    let limit = limit.max(1);
    let mut window = first_window(client, table, limit).await?;
    let mut after = resume.after;
    let mut taken = 0_u64;
    while taken < limit && after.page < resume.pages {
        let end = u64::from(after.page)
            .saturating_add(window.max(1))
            .min(u64::from(resume.pages));
        // Literals of unknown type take ctid's type, which a TID range scan needs.
        let sql = format!(
            "SELECT {list}, ctid FROM {table} WHERE ctid > '{after}' AND ctid < '({end},0)' ORDER BY ctid LIMIT {}",
            limit - taken
        );
        let (got, last) = copy_window(client, &sql, rows, meta).await?;
        taken += got;
        match last {
            // The window held the rest of the chunk: the next starts after its last row.
            Some(last) if taken >= limit => after = last,
            // Fewer rows than asked: the window is done, and the next may be wider.
            _ => {
                after = Tid::page_start(u32::try_from(end).unwrap_or(u32::MAX));
                window = window.saturating_mul(2);
            }
        }
    }
    let copied = resume.copied + taken;
    Ok(match after.page < resume.pages {
        true => CopyProgress::AfterTuple(TupleResume {
            after,
            copied,
            ..resume
        }),
        false => CopyProgress::Done,
    })
}

/// Runs `sql` (its last column the tuple id) into `rows`: how many rows and the last
/// one's tuple id.
async fn copy_window(
    client: &Client,
    sql: &str,
    rows: &mut ChangeRows,
    meta: ChangeMeta,
) -> Result<(u64, Option<Tid>), PgError> {
    let mut last = None;
    let width = rows.columns().len() + 1;
    let n = copy_rows(client, sql, width, |mut values| {
        let tid = values.pop().flatten().unwrap_or_default();
        last = Some(tid.parse::<Tid>().map_err(PgError::Protocol)?);
        rows.push(values, meta)
    })
    .await?;
    Ok((n, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuple_ids_print_and_parse_as_postgres_does() {
        let tid = Tid {
            page: 12,
            offset: 40,
        };
        assert_eq!(tid.to_string(), "(12,40)");
        assert_eq!("(12,40)".parse::<Tid>(), Ok(tid));
        assert_eq!(Tid::page_start(3).to_string(), "(3,0)");
        assert!(Tid::page_start(3) < tid && tid < Tid::page_start(13));
        for bad in ["12,40", "(12)", "(a,1)", "(1,70000)", ""] {
            assert!(bad.parse::<Tid>().is_err(), "{bad}");
        }
    }
}
