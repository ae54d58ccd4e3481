//! The policies and shared limits as written: each remedy's raw type lives in its own
//! module under `policy/`; these names are what the config file's sections hold.

pub use crate::policy::config::RawRef;
pub use crate::policy::matcher::RawMatch;
pub use crate::policy::queue::RawQueue;
pub use crate::policy::remedies::RawPolicy;
