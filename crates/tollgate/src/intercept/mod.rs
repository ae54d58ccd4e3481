//! HTTPS interception (#25): a local certificate authority whose leaf certificates let
//! tollgate terminate the TLS of CONNECT tunnels to the hosts a user chose, so remedies and
//! diagnosis apply to applications that only set `HTTPS_PROXY`. Built so far: the CA
//! (made, loaded, fingerprinted, exported by `tollgate ca`) and the leaves it signs.

pub mod ca;
