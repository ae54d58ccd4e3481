//! What tokens cost, per model: the table shipped with tollgate (its date and sources
//! below), extended or overridden by a policy's `llm.prices`. A model is found by its
//! exact name, else by the longest name it starts with (`gpt-4o-2024-08-06` is priced as
//! `gpt-4o`). Money is counted in nano-dollars (10⁻⁹ USD) so a few tokens of a cheap
//! model still count.

use super::Usage;
use serde::{Deserialize, Serialize};

/// When the shipped table was written, and where from. Providers change prices: check
/// them against the sources, and set `llm.prices` where they differ.
pub const AS_OF: &str = "2025-11-01";
pub const SOURCES: &[&str] = &[
    "https://openai.com/api/pricing/",
    "https://www.anthropic.com/pricing#api",
    "https://ai.google.dev/gemini-api/docs/pricing",
];

/// USD per million tokens (standard tier; Gemini's prices for prompts up to 200k tokens).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Prompt tokens.
    pub input: f64,
    /// Generated tokens (reasoning included).
    pub output: f64,
    /// Prompt tokens read from the provider's cache; the `input` price when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    /// Prompt tokens written to the provider's cache (Anthropic); the `input` price when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

const fn p(input: f64, cached: f64, output: f64) -> Price {
    Price {
        input,
        output,
        cached_input: Some(cached),
        cache_write: None,
    }
}

const fn a(input: f64, output: f64) -> Price {
    // Anthropic: cache reads at 0.1×, 5-minute cache writes at 1.25× the input price.
    Price {
        input,
        output,
        cached_input: Some(input * 0.1),
        cache_write: Some(input * 1.25),
    }
}

/// The shipped table (see [`AS_OF`] and [`SOURCES`]).
pub const SHIPPED: &[(&str, Price)] = &[
    ("gpt-5", p(1.25, 0.125, 10.0)),
    ("gpt-5-mini", p(0.25, 0.025, 2.0)),
    ("gpt-5-nano", p(0.05, 0.005, 0.40)),
    ("gpt-4.1", p(2.0, 0.50, 8.0)),
    ("gpt-4.1-mini", p(0.40, 0.10, 1.60)),
    ("gpt-4.1-nano", p(0.10, 0.025, 0.40)),
    ("gpt-4o", p(2.50, 1.25, 10.0)),
    ("gpt-4o-mini", p(0.15, 0.075, 0.60)),
    ("o3", p(2.0, 0.50, 8.0)),
    ("o4-mini", p(1.10, 0.275, 4.40)),
    ("o3-mini", p(1.10, 0.55, 4.40)),
    ("o1", p(15.0, 7.50, 60.0)),
    ("o1-mini", p(1.10, 0.55, 4.40)),
    ("text-embedding-3-small", p(0.02, 0.02, 0.0)),
    ("text-embedding-3-large", p(0.13, 0.13, 0.0)),
    ("claude-opus-4-5", a(5.0, 25.0)),
    ("claude-opus-4-1", a(15.0, 75.0)),
    ("claude-opus-4", a(15.0, 75.0)),
    ("claude-sonnet-4-5", a(3.0, 15.0)),
    ("claude-sonnet-4", a(3.0, 15.0)),
    ("claude-3-7-sonnet", a(3.0, 15.0)),
    ("claude-haiku-4-5", a(1.0, 5.0)),
    ("claude-3-5-haiku", a(0.80, 4.0)),
    ("gemini-2.5-pro", p(1.25, 0.125, 10.0)),
    ("gemini-2.5-flash", p(0.30, 0.03, 2.50)),
    ("gemini-2.5-flash-lite", p(0.10, 0.01, 0.40)),
    ("gemini-2.0-flash", p(0.10, 0.025, 0.40)),
];

/// Models whose prices each thread remembers ([`Prices::remembered`]).
const REMEMBERED: usize = 8;

/// A policy's table: its own entries first, then the shipped ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    /// Sorted by name, for [`lookup`].
    own: Vec<(String, Price)>,
}

impl Prices {
    pub fn new(own: impl IntoIterator<Item = (String, Price)>) -> Self {
        let mut own: Vec<(String, Price)> = own.into_iter().collect();
        own.sort_by(|a, b| a.0.cmp(&b.0));
        Self { own }
    }

    /// [`Prices::of`], the last [`REMEMBERED`] tables and models asked on this thread
    /// remembered: a call is priced on admission by the model it asks for and when it
    /// ends by the one its answer names (often a dated snapshot of it), and a gateway's
    /// calls mostly name the same few models (two binary searches of the tables take
    /// some 350 instructions). The table is held, not only its address, so that a table
    /// freed by a reload cannot be taken for a new one allocated at the same place.
    pub fn remembered(table: &std::sync::Arc<Prices>, model: &str) -> Option<Price> {
        type Last = Vec<(std::sync::Arc<Prices>, String, Option<Price>)>;
        thread_local! {
            static LAST: std::cell::RefCell<Last> = const { std::cell::RefCell::new(Vec::new()) };
        }
        LAST.with(|last| {
            let Ok(mut last) = last.try_borrow_mut() else {
                return table.of(model);
            };
            let same = |(t, m, _): &&(_, String, _)| std::sync::Arc::ptr_eq(t, table) && m == model;
            if let Some((_, _, p)) = last.iter().find(same) {
                return *p;
            }
            let p = table.of(model);
            if last.len() >= REMEMBERED {
                last.pop();
            }
            last.insert(0, (table.clone(), model.to_owned(), p));
            p
        })
    }

    /// The price of `model`: an exact name first (the policy's, then the shipped one),
    /// else the longest name it starts with (on a tie, the policy's own).
    pub fn of(&self, model: &str) -> Option<Price> {
        let own = lookup(&self.own, model);
        if let Some((true, _, p)) = own {
            return Some(p);
        }
        let shipped = lookup(&SORTED, model);
        match (own, shipped) {
            (_, Some((true, _, p))) => Some(p),
            (Some((_, a, p)), Some((_, b, _))) if a >= b => Some(p),
            (_, Some((_, _, p))) | (Some((_, _, p)), None) => Some(p),
            (None, None) => None,
        }
    }
}

/// The shipped table sorted by name.
static SORTED: std::sync::LazyLock<Vec<(&str, Price)>> = std::sync::LazyLock::new(|| {
    let mut t = SHIPPED.to_vec();
    t.sort_by(|a, b| a.0.cmp(b.0));
    t
});

/// In `table` (sorted by name): whether `model` is a name of it, the length of the name
/// found, and its price: the exact name, else the longest name `model` starts with. A
/// binary search, then a walk back: of two names both prefixes of `model`, the shorter is
/// a prefix of the longer and sorts before it, so the first prefix met is the longest;
/// past the names that share `model`'s first byte none can be one.
fn lookup<S: AsRef<str>>(table: &[(S, Price)], model: &str) -> Option<(bool, usize, Price)> {
    let end = table.partition_point(|(n, _)| n.as_ref() <= model);
    let first = model.as_bytes().first();
    for (n, p) in table[..end].iter().rev() {
        let n = n.as_ref();
        if n == model {
            return Some((true, n.len(), *p));
        }
        if model.starts_with(n) {
            return Some((false, n.len(), *p));
        }
        if n.as_bytes().first() != first {
            break;
        }
    }
    None
}

/// What `u` costs at `p`, in nano-dollars (rounded up).
pub fn cost_nanos(u: &Usage, p: &Price) -> u64 {
    let cached = u.cached.min(u.input);
    let write = u.cache_write.min(u.input - cached);
    let plain = u.input - cached - write;
    // USD per million tokens is micro-dollars per token: ×1000 for nano-dollars.
    let micro = plain as f64 * p.input
        + cached as f64 * p.cached_input.unwrap_or(p.input)
        + write as f64 * p.cache_write.unwrap_or(p.input)
        + u.output as f64 * p.output;
    (micro * 1000.0).ceil().max(0.0) as u64
}

/// Nano-dollars written as dollars (`$0.000125`).
pub fn dollars(nanos: u64) -> String {
    format!("${}.{:09}", nanos / 1_000_000_000, nanos % 1_000_000_000)
        .trim_end_matches('0')
        .trim_end_matches('.')
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_are_found_by_name_then_by_prefix() {
        let prices = Prices::new([("gpt-4o".to_owned(), p(1.0, 0.5, 2.0))]);
        assert_eq!(
            prices.of("gpt-4o").unwrap().input,
            1.0,
            "the policy's own first"
        );
        assert_eq!(
            prices.of("gpt-4o-mini").unwrap().input,
            0.15,
            "exact beats prefix"
        );
        assert_eq!(prices.of("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(prices.of("gpt-4o-2024-08-06").unwrap().input, 1.0);
        assert!(prices.of("llama3").is_none());
        // Between a name and its longest prefix, other names of the same start.
        let own = Prices::new([
            ("m".to_owned(), p(1.0, 1.0, 1.0)),
            ("m-a".to_owned(), p(2.0, 2.0, 2.0)),
            ("m-b-x".to_owned(), p(3.0, 3.0, 3.0)),
        ]);
        assert_eq!(own.of("m-b-y").unwrap().input, 1.0);
        assert_eq!(own.of("m-a").unwrap().input, 2.0);
        assert_eq!(own.of("claude-opus-4-5-20251101").unwrap().input, 5.0);
        assert_eq!(own.of("claude-opus-4-20250514").unwrap().input, 15.0);
    }

    #[test]
    fn the_price_remembered_is_the_one_of_the_table_and_model_asked() {
        use std::sync::Arc;
        let own = Arc::new(Prices::new([("gpt-4o".to_owned(), p(1.0, 0.5, 2.0))]));
        let shipped = Arc::new(Prices::default());
        let input = |t: &Arc<Prices>, m: &str| Prices::remembered(t, m).map(|p| p.input);
        for _ in 0..2 {
            assert_eq!(input(&own, "gpt-4o"), Some(1.0));
            assert_eq!(input(&own, "gpt-4o"), Some(1.0));
            // Another table, the same model: its own price.
            assert_eq!(input(&shipped, "gpt-4o"), Some(2.50));
            assert_eq!(input(&shipped, "llama3"), None);
            assert_eq!(input(&shipped, "gpt-4o-mini"), Some(0.15));
        }
        // More models than are remembered, asked in turn: each its own price.
        let names: Vec<&str> = SHIPPED
            .iter()
            .map(|(n, _)| *n)
            .take(REMEMBERED + 3)
            .collect();
        for _ in 0..3 {
            for n in &names {
                let dated = format!("{n}-2025-01-01");
                for m in [*n, dated.as_str()] {
                    assert_eq!(input(&shipped, m), shipped.of(m).map(|p| p.input), "{m}");
                }
            }
        }
        // A table dropped and another made in its place is not taken for it.
        drop(own);
        let other = Arc::new(Prices::new([("gpt-4o".to_owned(), p(9.0, 9.0, 9.0))]));
        assert_eq!(input(&other, "gpt-4o"), Some(9.0));
    }

    #[test]
    fn cached_tokens_cost_their_own_price() {
        let u = Usage {
            input: 1_000_000,
            output: 1_000_000,
            cached: 500_000,
            cache_write: 0,
            reasoning: 0,
        };
        // gpt-4o: 0.5M × $2.50 + 0.5M × $1.25 + 1M × $10 = $11.875
        let c = cost_nanos(&u, &Prices::default().of("gpt-4o").unwrap());
        assert_eq!(c, 11_875_000_000);
        assert_eq!(dollars(c), "$11.875");
        assert_eq!(dollars(1), "$0.000000001");
        assert_eq!(dollars(2_000_000_000), "$2");
    }
}
