//! Integration tests of the PostgreSQL source against a real server (README,
//! "PostgreSQL for the source's tests"): each test creates a database of its own and
//! drops it. Without a server they fail, naming what is missing.

// Tests may unwrap and panic: a failure is their report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_possible_truncation
)]

mod server;
mod stream;
