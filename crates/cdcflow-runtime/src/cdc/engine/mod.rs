//! The engine: the fast ways a batch of events reaches an AUTO CDC target's tables,
//! behind the few names the rest of the crate uses. The rules (`kernel/`, `rules.rs`)
//! decide what one key's events make of its stored rows; everything here is about doing
//! that for many keys at once without holding more than needed: the state rows of only
//! the keys a batch touches (`touched.rs`), decided on every core in shares of keys
//! (`shares.rs`, `keyset.rs`), written by merge-on-write (`merged.rs`) or streamed
//! through both tables (`streamed.rs`), a first batch a partition of its keys at a time
//! (`partitioned.rs`) or, when large, a group of its keys at a time (`load.rs`), the way
//! chosen by what the tables allow (`staging.rs`). The threads are here (and in
//! `delta`'s readers and writers), never in the rules.

mod keyset;
mod load;
pub mod merged;
pub mod partitioned;
mod shares;
mod staging;
pub mod streamed;
mod touched;

pub use load::GroupedLoad;
pub(crate) use load::Grouping;
pub use partitioned::{Load, PARTITION_ROWS};
pub(crate) use shares::newest_markers;
pub use staging::{Staging, concat_parts, stage};
pub use streamed::{Streamed, Targets};
pub use touched::apply;
