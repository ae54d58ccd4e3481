//! What one LLM call used, as its answer streams: the [`Meter`] is shared by the body that
//! reads the answer, the remedies that reconcile their reservations when the call ends and
//! diagnosis, and updated as each event passes, so a stream cut by either side still
//! tells what was counted until then.

use super::Api;
use super::usage::{Reported, Usage};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One call's usage, as far as its answer has told it.
#[derive(Debug, Default, Clone)]
pub struct Metered {
    /// The model the request asked for.
    pub requested: Option<Arc<str>>,
    /// The model the answer names (a dated snapshot of the one asked for).
    pub answered: Option<Arc<str>>,
    pub reported: Reported,
    /// A successful answer is being relayed from the provider (else nothing was used: an
    /// error, a refusal, an answer made by tollgate).
    pub relayed: bool,
    /// The answer's own usage arrived whole (a complete JSON answer, a stream's final
    /// usage): nothing is estimated.
    pub whole: bool,
    /// Part of the answer could not be read (a coding tollgate does not decode, a
    /// decompression bomb, an event past the cap): unless its final usage was read, the
    /// call is charged what was reserved for its output.
    pub unread: bool,
    /// The output reserved on admission: its cap (or `llm.output_estimate`) for each
    /// choice.
    pub output_reserve: u64,
    /// Content events streamed (about a token each): the output of a stream cut before
    /// its usage arrived.
    pub chunks: u64,
    /// The prompt's tokens as estimated on admission (the input of a stream cut before
    /// it told them).
    pub input_estimate: u64,
    /// From the request's send to the answer's first body bytes.
    pub first_byte: Option<Duration>,
    /// Which entry of the `fallback:` list answered (0: the request as sent).
    pub fallback: u32,
    /// The policy's price table.
    pub prices: Arc<super::prices::Prices>,
}

impl Metered {
    /// The usage to count: the answer's, with what it did not tell estimated (a stream
    /// cut early: the admission's prompt estimate, a token per content event).
    pub fn usage(&self) -> Usage {
        if !self.relayed {
            return Usage::default();
        }
        let r = &self.reported;
        let output = match (self.whole, r.output) {
            (true, Some(o)) => o,
            (_, o) if self.unread => o.unwrap_or(0).max(self.chunks).max(self.output_reserve),
            (_, o) => o.unwrap_or(0).max(self.chunks),
        };
        Usage {
            input: r.input.unwrap_or(self.input_estimate),
            output,
            cached: r.cached.unwrap_or(0),
            cache_write: r.cache_write.unwrap_or(0),
            reasoning: r.reasoning.unwrap_or(0),
        }
    }

    /// Whether any of it is estimated rather than told by the provider: a relayed answer
    /// whose final usage never arrived. A stream's early events tell partial counts
    /// (Anthropic's `message_start` says `output_tokens: 1`), so a count seen is not
    /// the final one until the answer says so.
    pub fn estimated(&self) -> bool {
        self.relayed && !self.whole
    }

    /// What the usage cost, in nano-dollars, priced as the answer's model, else the
    /// requested one; `None` when neither has a price.
    pub fn cost_nanos(&self) -> Option<u64> {
        let price = [self.answered.as_ref(), self.requested.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|m| super::prices::Prices::remembered(&self.prices, m))?;
        Some(super::prices::cost_nanos(&self.usage(), &price))
    }

    /// What diagnosis shows of the call (HAR's `_tollgateUsage`, the access log).
    pub fn summary(&self, api: Api) -> serde_json::Value {
        let u = self.usage();
        serde_json::json!({
            "api": api.name(),
            "model": self.model().map(|m| &**m),
            "requested_model": self.requested.as_deref(),
            "input_tokens": u.input,
            "output_tokens": u.output,
            "cached_tokens": u.cached,
            "cache_write_tokens": u.cache_write,
            "reasoning_tokens": u.reasoning,
            "estimated": self.estimated(),
            "cost_usd": self.cost_nanos().map(|c| c as f64 / 1e9),
            "time_to_first_byte_ms": self.first_byte.map(|d| d.as_secs_f64() * 1e3),
            "fallback": self.fallback,
        })
    }

    /// The model to price and label: the answer's, else the request's.
    pub fn model(&self) -> Option<&Arc<str>> {
        self.answered.as_ref().or(self.requested.as_ref())
    }
}

/// What an LLM answer cost when the provider generated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub model: Arc<str>,
    pub input: u64,
    pub output: u64,
    /// Nano-dollars, by the policy's prices (0 for an unpriced model).
    pub cost_nanos: u64,
}

impl Saved {
    /// What the answer `meter` read cost, once it ended: `None` when no model is known.
    pub fn of(meter: &Meter) -> Option<Box<Self>> {
        let m = meter.read();
        let model = m.model()?.clone();
        let u = m.usage();
        Some(Box::new(Self {
            model,
            input: u.input,
            output: u.output,
            cost_nanos: m.cost_nanos().unwrap_or(0),
        }))
    }
}

/// The shared record of one call. Its lock is the call's own (never contended across
/// requests).
#[derive(Debug)]
pub struct Meter {
    pub api: Api,
    state: Mutex<Metered>,
}

impl Meter {
    pub fn new(api: Api, m: Metered) -> Arc<Self> {
        Arc::new(Self {
            api,
            state: Mutex::new(m),
        })
    }

    pub fn read(&self) -> Metered {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the answer named its model already (read per event: no copy).
    pub fn knows_model(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .answered
            .is_some()
    }

    /// Reads the record in place (no copy).
    pub fn with<R>(&self, f: impl FnOnce(&Metered) -> R) -> R {
        f(&self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn update(&self, f: impl FnOnce(&mut Metered)) {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// A usage object (`usage`, `usageMetadata`) of the answer; `whole` when it is the
    /// answer's final word.
    pub fn usage_value(&self, v: &serde_json::Value, whole: bool) {
        self.reported(Reported::read(self.api, v), whole);
    }

    /// [`Meter::usage_value`] of a usage object's JSON text (what a scan kept).
    pub fn usage_json(&self, json: &[u8], whole: bool) {
        self.reported(Reported::parse(self.api, json), whole);
    }

    /// A usage object's counts, read; `whole` when it is the answer's final word.
    pub fn reported(&self, r: Option<Reported>, whole: bool) {
        if let Some(r) = r {
            self.update(|m| {
                m.reported.merge(r);
                m.whole |= whole;
            });
        }
    }

    /// The model the answer names.
    pub fn model_value(&self, v: &serde_json::Value) {
        self.model(v.as_str());
    }

    /// [`Meter::model_value`] of the JSON text of the model's string.
    pub fn model_json(&self, json: &[u8]) {
        // A name with no escape (every model's) is the text between its quotes: one of
        // the worker's last names when it is one (its text already checked), else
        // checked here.
        if let [b'"', inner @ .., b'"'] = json
            && crate::json::swar::string_stop(inner).is_none()
        {
            if (1..=256).contains(&inner.len())
                && let Some(name) = super::names::remembered(inner)
            {
                self.update(|m| m.answered = Some(name));
                return;
            }
            if let Ok(s) = std::str::from_utf8(inner) {
                return self.model(Some(s));
            }
        }
        let s = serde_json::from_slice::<std::borrow::Cow<str>>(json).ok();
        self.model(s.as_deref());
    }

    fn model(&self, s: Option<&str>) {
        if let Some(s) = s.filter(|s| !s.is_empty() && s.len() <= 256) {
            self.update(|m| m.answered = Some(super::names::shared(s)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_name_is_read_with_or_without_escapes() {
        let cases = [
            (&br#""gpt-4o-2024-08-06""#[..], Some("gpt-4o-2024-08-06")),
            (br#""gpt\u002d4o""#, Some("gpt-4o")),
            (br#""mod\u00e9le""#, Some("modéle")),
            (b"\"a\tb\"", None),
            (br#""""#, None),
            (br#"7"#, None),
            (b"\"\xff\"", None),
        ];
        // The second time, the names read the first are the worker's last ones.
        for (json, want) in cases.iter().chain(&cases) {
            let (json, want) = (*json, *want);
            let m = Meter::new(crate::protocol::openai_chat::API, Metered::default());
            m.model_json(json);
            assert_eq!(m.read().answered.as_deref(), want, "{json:?}");
        }
    }
}
