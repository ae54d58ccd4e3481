//! tollgate: an API egress gateway. A compact proxy next to an application that carries
//! its outgoing calls to third-party APIs, with remedies and diagnosis on top.
//!
//! The binary (crate `tollgate-cli`) is a thin command line over this library; tests
//! start [`Gateway`] in-process.
#![forbid(unsafe_code)]

pub mod admin;
pub mod aggregate;
pub mod body;
pub mod check;
pub mod config;
pub mod conns;
pub mod ctx;
pub mod diagnosis;
pub mod domains;
pub mod egress;
pub mod error;
pub mod expect;
pub mod fields;
pub mod glob;
pub mod headers;
pub mod intercept;
pub mod json;
pub mod llm;
pub mod logging;
pub mod mcp;
pub mod metrics;
pub mod observe;
pub mod paths;
pub mod policy;
pub mod protocol;
pub mod reference;
pub mod reload;
pub mod request;
pub mod request_id;
pub mod routes;
pub mod secret;
pub mod server;
pub mod state;
pub mod stream_watch;
pub mod target;
pub mod tunnel;
pub mod ui;
pub mod upgrade;
pub mod upstream;

pub use config::Config;
pub use server::{Gateway, StartError, StartOptions};
pub use state::Overrides;
