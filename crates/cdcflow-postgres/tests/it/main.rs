//! Integration tests of the PostgreSQL source against a real server (README,
//! "PostgreSQL for the source's tests"): each test creates a database of its own and
//! drops it. Without a server they fail, naming what is missing.

mod server;
mod stream;
