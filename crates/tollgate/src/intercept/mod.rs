//! HTTPS interception (#25): a local certificate authority whose leaf certificates let
//! tollgate terminate the TLS of CONNECT tunnels to the hosts a user chose, so remedies and
//! diagnosis apply to applications that only set `HTTPS_PROXY`. Built so far: the CA
//! (made, loaded, fingerprinted, exported by `tollgate ca`) and the leaf certificates it
//! signs, made on demand per host and cached (`leaves.rs`); not yet: the `intercept:`
//! config and the CONNECT tunnels that use them.

pub mod ca;
pub mod leaves;
