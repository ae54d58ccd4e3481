//! What an LLM request asks, read once from its JSON body on admission: the model, whether
//! it streams, its output cap, and an estimate of its prompt's tokens; and, for an OpenAI
//! chat stream that does not ask for its usage, `stream_options.include_usage` added.

use super::meter::{Meter, Metered};
use super::{Api, tokens};
use bytes::Bytes;
use serde_json::Value;
use std::sync::Arc;
use tokio::time::Instant;

/// One LLM call, as its request phase found it (a per-request local of the exchange).
pub struct Call {
    pub api: Api,
    pub model: Option<Arc<str>>,
    pub stream: bool,
    /// `max_tokens`, `max_completion_tokens`, `max_output_tokens` or Gemini's
    /// `generationConfig.maxOutputTokens`.
    pub max_output: Option<u64>,
    /// Answers generated per call: OpenAI's `n` (or `best_of`, which generates that many
    /// and returns the best), Gemini's `generationConfig.candidateCount`; 1 when unset.
    /// Each is billed its own output, so the reservation holds the cap this many times.
    pub choices: u64,
    /// The prompt's tokens, estimated ([`tokens`]): approximated when read, counted
    /// exactly by [`Call::count_prompt`].
    pub input_estimate: u64,
    /// The prompt kept for its exact count, when the reader asked for the tokenizer and
    /// the model has one; taken by the first remedy that reserves.
    pub prompt: Option<tokens::Prompt>,
    /// `include_usage` was added: the usage chunk is removed from what the client gets.
    pub strip_usage: bool,
    pub meter: Arc<Meter>,
    /// When the request phase read it (time to first byte counts from here).
    pub started: Instant,
    /// The answer's body is read for usage already (one reader whichever remedy set it).
    pub metering: bool,
    /// Output tokens reserved when the request sets no cap (`llm.output_estimate`).
    pub output_estimate: u64,
    /// The policy's price table.
    pub prices: Arc<super::prices::Prices>,
}

impl Call {
    /// Counts the prompt with the model's tokenizer (loading it the first time), for a
    /// remedy that reserves the estimate; once per call.
    pub fn count_prompt(&mut self) {
        if let Some(p) = self.prompt.take() {
            let n = p.count(self.model.as_deref());
            self.input_estimate = n;
            self.meter.update(|m| m.input_estimate = n);
        }
    }

    /// The usage to reserve on admission: the prompt's estimate and the output cap (or
    /// `llm.output_estimate` when the request sets none) for each of its choices.
    pub fn reserve(&self) -> super::Usage {
        let cap = self.max_output.unwrap_or(self.output_estimate);
        super::Usage {
            input: self.input_estimate,
            output: cap.saturating_mul(self.choices),
            ..Default::default()
        }
    }
}

/// What reading a request gave: the call, and the body to send instead when
/// `include_usage` was added.
pub struct Read {
    pub call: Call,
    pub body: Option<Bytes>,
}

/// Reads the request `body` of a call to `api` at `path`. `add_usage`: add
/// `stream_options.include_usage` to an OpenAI chat stream lacking it. `tokenizer`: keep
/// the prompt for [`Call::count_prompt`] where the model has a public tokenizer (the
/// estimate is a quarter of the text's bytes until then).
pub fn read(api: Api, path: &str, body: Option<&Bytes>, add_usage: bool, tokenizer: bool) -> Read {
    let v: Value = body
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or(Value::Null);
    let gemini_model = || {
        let name = path.rsplit('/').next()?;
        let model = name.split(':').next()?;
        Some(model)
    };
    let model: Option<Arc<str>> = match api {
        Api::Gemini => gemini_model().map(Arc::from),
        _ => v.get("model").and_then(|m| m.as_str()).map(Arc::from),
    };
    let stream = match api {
        Api::Gemini => path.ends_with(":streamGenerateContent"),
        _ => v.get("stream").and_then(|s| s.as_bool()).unwrap_or(false),
    };
    let max_output = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| v.get(k).and_then(|n| n.as_u64()))
        .or_else(|| {
            v.get("generationConfig")
                .and_then(|g| g.get("maxOutputTokens"))
                .and_then(|n| n.as_u64())
        });
    // `best_of` generates that many server-side (billed) whatever `n` returns.
    let choices = match api {
        Api::Gemini => v
            .get("generationConfig")
            .and_then(|g| g.get("candidateCount"))
            .and_then(|n| n.as_u64()),
        _ => ["n", "best_of"]
            .iter()
            .filter_map(|k| v.get(k).and_then(|n| n.as_u64()))
            .max(),
    }
    .unwrap_or(1)
    .max(1);
    let exact = model
        .as_deref()
        .is_some_and(|m| tokenizer && tokens::has_tokenizer(m));
    let prompt = tokens::Prompt::of(&v, exact);
    let input_estimate = prompt.approximate();
    let prompt = exact.then_some(prompt);
    let asks_usage = v
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(|u| u.as_bool())
        .unwrap_or(false);
    let add = add_usage && api == Api::OpenAiChat && stream && !asks_usage;
    let new_body = add.then(|| with_usage(body?, &v)).flatten();
    let meter = Meter::new(
        api,
        Metered {
            requested: model.clone(),
            input_estimate,
            ..Metered::default()
        },
    );
    Read {
        call: Call {
            api,
            model,
            stream,
            max_output,
            choices,
            input_estimate,
            prompt,
            strip_usage: new_body.is_some(),
            meter,
            started: Instant::now(),
            metering: false,
            output_estimate: 0,
            prices: Default::default(),
        },
        body: new_body,
    }
}

/// The body with `"stream_options":{"include_usage":true}`: written in front of the
/// object's first key when the request has no `stream_options` (every other byte kept as
/// sent), else the object written again with the option set.
fn with_usage(body: &Bytes, v: &Value) -> Option<Bytes> {
    if v.get("stream_options").is_none() {
        let open = body.iter().position(|&c| c == b'{')?;
        let empty = body[open + 1..]
            .iter()
            .find(|c| !c.is_ascii_whitespace())
            .is_some_and(|&c| c == b'}');
        let mut out = Vec::with_capacity(body.len() + 40);
        out.extend_from_slice(&body[..=open]);
        out.extend_from_slice(br#""stream_options":{"include_usage":true}"#);
        if !empty {
            out.push(b',');
        }
        out.extend_from_slice(&body[open + 1..]);
        return Some(out.into());
    }
    let mut v = v.clone();
    let opts = v.get_mut("stream_options")?.as_object_mut()?;
    opts.insert("include_usage".into(), Value::Bool(true));
    serde_json::to_vec(&v).ok().map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_is_approximated_until_a_reserving_remedy_counts_it() {
        let body = Bytes::from_static(
            br#"{"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello world"}]}"#,
        );
        let path = "/v1/chat/completions";
        let mut call = read(Api::OpenAiChat, path, Some(&body), false, true).call;
        // A quarter of "You are a helpful assistant.\nHello world" (40 bytes), and 3 a
        // message: what usage-only policies keep, no tokenizer loaded.
        assert_eq!(call.input_estimate, 10 + 6);
        call.count_prompt();
        // o200k_base: 8 tokens.
        assert_eq!(call.input_estimate, 8 + 6);
        assert_eq!(call.meter.read().input_estimate, 8 + 6);
        assert!(call.prompt.is_none(), "counted once");
        // Without the tokenizer, or for a model without a public one, nothing is kept.
        let off = read(Api::OpenAiChat, path, Some(&body), false, false).call;
        assert!(off.prompt.is_none());
        let other = Bytes::from_static(br#"{"model": "claude-sonnet-4-5", "messages": []}"#);
        assert!(
            read(Api::Anthropic, "/v1/messages", Some(&other), false, true)
                .call
                .prompt
                .is_none()
        );
    }

    #[test]
    fn a_chat_stream_gets_include_usage_and_keeps_its_bytes() {
        let body = Bytes::from_static(
            br#"{ "model" : "gpt-4o-mini", "stream": true, "max_tokens": 50, "n": 1.50}"#,
        );
        let r = read(
            Api::OpenAiChat,
            "/v1/chat/completions",
            Some(&body),
            true,
            false,
        );
        assert_eq!(r.call.model.as_deref(), Some("gpt-4o-mini"));
        assert!(r.call.stream && r.call.strip_usage);
        assert_eq!(r.call.max_output, Some(50));
        assert_eq!(
            &r.body.unwrap()[..],
            br#"{"stream_options":{"include_usage":true}, "model" : "gpt-4o-mini", "stream": true, "max_tokens": 50, "n": 1.50}"#
        );
        // Asked already, or not a stream: left alone.
        let asks = Bytes::from_static(
            br#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#,
        );
        let r = read(
            Api::OpenAiChat,
            "/v1/chat/completions",
            Some(&asks),
            true,
            false,
        );
        assert!(r.body.is_none() && !r.call.strip_usage);
        let whole = Bytes::from_static(br#"{"model":"m"}"#);
        assert!(
            read(Api::OpenAiChat, "/", Some(&whole), true, false)
                .body
                .is_none()
        );
    }

    #[test]
    fn gemini_names_its_model_and_stream_in_the_path() {
        let body = Bytes::from_static(br#"{"generationConfig":{"maxOutputTokens":64}}"#);
        let r = read(
            Api::Gemini,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            Some(&body),
            true,
            false,
        );
        assert_eq!(r.call.model.as_deref(), Some("gemini-2.5-flash"));
        assert!(r.call.stream && !r.call.strip_usage);
        assert_eq!(r.call.max_output, Some(64));
    }

    #[test]
    fn every_choice_reserves_its_output_cap() {
        let read_one = |api, path, body: &'static [u8]| {
            read(api, path, Some(&Bytes::from_static(body)), true, false).call
        };
        let c = read_one(
            Api::OpenAiChat,
            "/v1/chat/completions",
            br#"{"model":"m","n":50,"max_tokens":20}"#,
        );
        assert_eq!((c.choices, c.reserve().output), (50, 1000));
        let c = read_one(
            Api::OpenAiChat,
            "/v1/completions",
            br#"{"model":"m","n":2,"best_of":5,"max_tokens":10}"#,
        );
        assert_eq!(c.reserve().output, 50, "best_of generates 5");
        let c = read_one(
            Api::Gemini,
            "/v1beta/models/g:generateContent",
            br#"{"generationConfig":{"candidateCount":3,"maxOutputTokens":7}}"#,
        );
        assert_eq!(c.reserve().output, 21);
        let c = read_one(Api::OpenAiChat, "/v1/chat/completions", br#"{"n":0}"#);
        assert_eq!(c.choices, 1, "n: 0 is still one answer");
    }
}
