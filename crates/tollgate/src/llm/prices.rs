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

/// A policy's table: its own entries first, then the shipped ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    own: Vec<(String, Price)>,
}

impl Prices {
    pub fn new(own: impl IntoIterator<Item = (String, Price)>) -> Self {
        Self {
            own: own.into_iter().collect(),
        }
    }

    /// The price of `model`: an exact name first (the policy's, then the shipped one),
    /// else the longest name it starts with.
    pub fn of(&self, model: &str) -> Option<Price> {
        let all = || {
            self.own
                .iter()
                .map(|(n, p)| (n.as_str(), *p))
                .chain(SHIPPED.iter().copied())
        };
        if let Some((_, p)) = all().find(|(n, _)| *n == model) {
            return Some(p);
        }
        // The longest; on a tie the first (the policy's own before the shipped one).
        all()
            .filter(|(n, _)| model.starts_with(n))
            .fold(None, |best: Option<(&str, Price)>, (n, p)| match best {
                Some((b, _)) if b.len() >= n.len() => best,
                _ => Some((n, p)),
            })
            .map(|(_, p)| p)
    }
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
