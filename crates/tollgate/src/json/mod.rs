//! The pieces tollgate's hand JSON readers share: a word-at-a-time search for where a
//! string's run ends ([`swar`]) and one pass over a document that checks its grammar and
//! calls back at the members a reader wants ([`walk`]). The readers (MCP's envelope, an
//! LLM answer's usage) each answer only what they are sure of and leave the rest to
//! serde_json, so a hand pass never takes what serde_json refuses, nor the other way.

#[cfg(test)]
pub mod mutants;
pub mod swar;
pub mod walk;
