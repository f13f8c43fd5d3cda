//! # open-deno-kv-test-services — outside services for the workspace's tests
//!
//! Tests of continuous backup need an S3-compatible object store and the real denokv 0.14;
//! this crate starts or finds them the one way every test of the workspace uses, and never lets
//! a test pass without them unnoticed.
//!
//! - [`S3TestServer`] (`s3.rs`): moto in server mode on 127.0.0.1 and a free port, with a
//!   bucket created, the URL and the environment to give our code and denokv, and the process
//!   stopped on drop. moto is found in `MOTO_SERVER_BIN`, or installed once into a Python
//!   virtual environment under `target/` by the repository's `.ci/install-moto` (`moto.rs`).
//! - [`denokv_binary`] (`denokv.rs`): denokv 0.14, from `DENOKV_BIN` or where
//!   `.ci/denokv-conformance` builds it (`denokv-0.14.0/bin/denokv` in the target directory).
//!
//! A test whose service is missing fails with what to install, unless it is told to skip
//! (`KV_S3_TESTS=skip`, `KV_DENOKV_TESTS=skip`): then it says so loudly on stderr and returns
//! early, as the PostgreSQL tests do with `KV_POSTGRES_TESTS=skip`.
//!
//! ```no_run
//! use open_deno_kv_test_services::S3TestServer;
//!
//! let Some(s3) = S3TestServer::start_or_skip() else {
//!     return; // KV_S3_TESTS=skip, and it said so
//! };
//! let url = s3.url("backups/");
//! let mut command = std::process::Command::new("kv");
//! command.args(["backups", "list", &url]).envs(s3.env());
//! ```

mod denokv;
mod error;
mod moto;
mod s3;
mod skip;

pub use denokv::{DENOKV_VERSION, denokv_binary, denokv_or_skip};
pub use error::TestServiceError;
pub use moto::{MOTO_VERSION, moto_server_binary};
pub use s3::{ACCESS_KEY_ID, BUCKET, REGION, S3TestServer, SECRET_ACCESS_KEY};
pub use skip::{DENOKV_SKIP_VARIABLE, S3_SKIP_VARIABLE};
