//! LLM calls, whichever API ([`Shape`]; the APIs themselves are modules of
//! `protocol`): what a request asks (model, streaming, output cap, an estimate of
//! its prompt's tokens), and the usage its answer reports, taken as the answer streams past ([`body::Metered`]) without holding it back. The remedies that
//! count tokens and money (`token_limit`, `budget`), the fallback across models and
//! diagnosis all read the one [`Meter`] a call carries (docs/llm.md).

pub mod body;
pub mod counts;
pub mod decode;
pub mod meter;
pub mod names;
pub mod prices;
pub mod request;
pub mod scan;
pub mod shape;
pub mod sse;
pub mod tokens;
pub mod usage;
pub mod whole;

pub use meter::{Meter, Metered, Saved};
pub use request::Call;
pub use shape::{Api, Shape};
pub use usage::Usage;
