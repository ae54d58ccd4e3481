//! The gateway's integration tests, one binary: each module is an area (routing, limits,
//! HAR, …), all over real sockets against in-process gateways and upstreams. Tests that
//! measure the process's memory (`har_load`, `large_bodies`) have binaries of their own,
//! so that nothing else runs beside them.

#[path = "../support/mod.rs"]
mod support;

mod access_log;
mod admin;
mod aggregate;
mod architecture;
mod cache;
mod client_contract;
mod clients;
mod collector_bounds;
mod config;
mod config_files;
mod config_properties;
mod connections;
mod dashboard;
mod discovery;
mod dns;
mod doc_links;
mod egress;
mod errors;
mod expect_continue;
mod generated;
mod grafana;
mod har;
mod har_bodies;
mod har_files;
mod header_guard;
mod intercept;
mod intercept_clients;
mod limits;
mod llm;
mod llm_accounting;
mod llm_sdks;
mod mcp;
mod mcp_sdks;
mod metric_labels;
mod policies;
mod provider;
mod reload;
mod remedies_paused;
mod resilience;
mod routing;
mod sdks;
mod shared_cache;
mod shared_store;
mod shutdown;
mod streaming;
mod tls;
mod traces;
mod transparency;
mod upgrades;
mod upstream_pool;
mod wire;
mod wire_matrix;
mod workers;
