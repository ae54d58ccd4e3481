//! LLM calls: recognises the request (OpenAI-compatible, Anthropic, Gemini), reads what it
//! asks (model, stream, output cap, its prompt's tokens estimated), adds
//! `stream_options.include_usage` to an OpenAI chat stream lacking it, and reads the
//! answer's usage as it streams past (crate::llm). `token_limit` and `budget` count
//! what it reads, and do the same with the defaults when a policy has no `llm:` key.

pub mod fallback;

use crate::body::Body;
use crate::error::ProxyError;
use crate::fields::units::{Int, Size};
use crate::llm::prices::{Price, Prices};
use crate::llm::{Call, request};
use crate::metrics::sharded::ShardedCounter;
use crate::policy::chain::{Built, Exchange, Flow, Phase, Remedy};
use crate::policy::compile::Build;
use crate::policy::kind::{Check, Phases, RemedyKind};
use http::{Method, Response, header};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How a policy reads its LLM calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub add_stream_usage: bool,
    pub tokenizer: bool,
    /// A remedy of the policy counts prompts: the request's read keeps the prompt's text
    /// (set when the chain is built, from the policy).
    pub keep_prompt: bool,
    pub output_estimate: u64,
    pub max_body: usize,
    pub prices: Arc<Prices>,
    /// `fallback` and `fallback_on`, when the list has entries.
    pub fallback: Option<fallback::Spec>,
    /// Where a remedy that reserves counts how its prompts' strings were counted.
    pub prompt_strings: PromptStrings,
}

/// `tollgate_llm_prompt_strings_total`'s two series, counted by each call's worker.
#[derive(Clone, Default)]
pub struct PromptStrings {
    counted: ShardedCounter,
    remembered: ShardedCounter,
}

impl PromptStrings {
    /// The series of `metrics`.
    pub fn of(metrics: &crate::metrics::Metrics) -> Self {
        let series = |kind| {
            let labels = crate::metrics::KindLabels { kind };
            metrics.llm_prompt_strings.get_or_create(&labels).clone()
        };
        PromptStrings {
            counted: series("counted"),
            remembered: series("remembered"),
        }
    }

    fn note(&self, s: crate::llm::counts::Strings) {
        if s.counted > 0 {
            self.counted.inc_by(s.counted);
        }
        if s.remembered > 0 {
            self.remembered.inc_by(s.remembered);
        }
    }
}

/// Counters are where the settings count, not part of what they are.
impl PartialEq for PromptStrings {
    fn eq(&self, _: &PromptStrings) -> bool {
        true
    }
}

impl std::fmt::Debug for PromptStrings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PromptStrings")
    }
}

impl Default for Settings {
    fn default() -> Self {
        spec(&RawLlm::default())
    }
}

/// `llm:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "llm";
    const PHASES: Phases = Phases {
        request: "reads an LLM request (model, stream, output cap, prompt tokens estimated); adds `include_usage` to an OpenAI chat stream",
        attempt: "",
        response: "reads the answer's usage as it streams (removing the usage chunk it asked for)",
    };
    const EXAMPLE: &'static str = "{prices: {my-finetune: {input: 3.0, cached_input: 0.3, cache_write: 3.75, output: 12.0}}, fallback: [{model: gpt-4o-mini}, {upstream: 'https://openrouter.ai/api', model: openai/gpt-4o-mini, account: {bearer: '${KEY}'}}]}";
    type Raw = RawLlm;
    type Spec = Settings;
    type Action = crate::policy::kind::NoActions;
    type Metrics = ();

    fn validate(raw: &RawLlm, cx: &mut Check<'_>) -> Option<Settings> {
        for (model, p) in &raw.prices {
            let prices = [
                ("input", Some(p.input)),
                ("output", Some(p.output)),
                ("cached_input", p.cached_input),
                ("cache_write", p.cache_write),
            ];
            for (field, v) in prices {
                if let Some(v) = v.filter(|v| !v.is_finite() || *v < 0.0) {
                    cx.errors.fail(
                        &cx.at(&format!("prices.{model}.{field}")),
                        format!("`{v}`: write USD per million tokens, 0 or more (e.g. 2.5)"),
                    );
                }
            }
        }
        let mut s = spec(raw);
        s.fallback = fallback::spec(cx.errors, &cx.path, &raw.fallback, &raw.fallback_on);
        Some(s)
    }

    fn secrets(s: &Settings, names: &mut Vec<String>, values: &mut Vec<String>) {
        if let Some(f) = &s.fallback {
            let accounts: Vec<_> = f.entries.iter().filter_map(|e| e.account.clone()).collect();
            crate::policy::remedies::credentials::secrets(&accounts, names, values);
        }
    }

    fn build(s: &Settings, b: &mut Build<'_>) -> Built {
        let llm = Arc::new(Llm(Settings {
            keep_prompt: b.counts_prompts,
            ..s.clone()
        }));
        match &s.fallback {
            None => Built::from(llm),
            Some(f) => {
                let f = Arc::new(fallback::Fallbacks(f.clone()));
                Built {
                    attempt: Some(f.clone()),
                    fallback: Some(f),
                    ..Built::from(llm)
                }
            }
        }
    }
}

fn spec(raw: &RawLlm) -> Settings {
    Settings {
        add_stream_usage: raw.add_stream_usage,
        tokenizer: raw.tokenizer,
        keep_prompt: false,
        output_estimate: raw.output_estimate.get(),
        max_body: raw.max_body.get(),
        prices: Arc::new(Prices::new(raw.prices.clone())),
        fallback: None,
        prompt_strings: PromptStrings::default(),
    }
}

struct Llm(Settings);

impl Remedy for Llm {
    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        Phase::wait(async move {
            call(x, &self.0).await?;
            Ok(Flow::Continue)
        })
    }

    fn response(&self, x: &mut Exchange, resp: Response<Body>) -> Response<Body> {
        let mut resp = meter(x, resp);
        if let Some(f) = &self.0.fallback
            && x.locals.get::<Call>().is_some()
        {
            // Who answered: the model asked of it, and its entry (0: the request as sent).
            let h = resp.headers_mut();
            h.insert(X_TOLLGATE_FALLBACK, fallback::entry_of(x).into());
            if let Some(m) = fallback::model_of(f, x) {
                h.insert(X_TOLLGATE_MODEL, m);
            }
        }
        resp
    }
}

/// The model the answering attempt asked for (with `llm.fallback`).
pub const X_TOLLGATE_MODEL: http::HeaderName = http::HeaderName::from_static("x-tollgate-model");
/// Which entry of `llm.fallback` answered (0: the request as sent).
pub const X_TOLLGATE_FALLBACK: http::HeaderName =
    http::HeaderName::from_static("x-tollgate-fallback");

/// The LLM call `x` makes, read once (by the first remedy that needs it) with
/// `settings` into its locals; whether it is one.
pub async fn call(x: &mut Exchange, settings: &Settings) -> Result<bool, ProxyError> {
    if x.locals.get::<Call>().is_none() {
        // Recognised as the provider routes the path (`%63ompletions` is `completions`).
        use crate::policy::path::normalized;
        let Some(api) = (x.method == Method::POST)
            .then(|| crate::protocol::llm_api(&normalized(x.parts.uri.path())))
            .flatten()
        else {
            return Ok(false);
        };
        // The body is borrowed from the exchange with its path (normalised again rather
        // than copied across the wait: most paths have no `%` and borrow as they are).
        let fits = x.buffer(settings.max_body).await?.is_some();
        let body = x.buffered.as_ref().filter(|_| fits);
        let path = normalized(x.parts.uri.path());
        let reading = request::Reading {
            add_stream_usage: settings.add_stream_usage,
            tokenizer: settings.tokenizer,
            keep_prompt: settings.keep_prompt,
            output_estimate: settings.output_estimate,
            prices: settings.prices.clone(),
        };
        let read = request::read(api, &path, body, reading);
        if let Some(b) = read.body {
            x.parts
                .headers
                .insert(header::CONTENT_LENGTH, b.len().into());
            crate::headers::remove_in_order(&mut x.parts.headers, |n| {
                n == header::TRANSFER_ENCODING
            });
            // The usage chunk asked for is removed from the stream, which needs it
            // uncompressed (RFC 9110 §12.5.3: identity is always acceptable).
            x.parts.headers.insert(
                header::ACCEPT_ENCODING,
                http::HeaderValue::from_static("identity"),
            );
            x.buffered = Some(b);
        }
        let call = read.call;
        if let Some(d) = &mut x.diag {
            d.llm = Some(call.meter.clone());
        }
        x.locals.insert(call);
    }
    Ok(true)
}

/// Counts the prompt of the call `x` makes with its model's tokenizer (for a remedy that
/// reserves; see [`Call::count_prompt`]): the body as the call's read saw it.
pub fn count_prompt(x: &mut Exchange, settings: &Settings) {
    if let Some(c) = x.locals.get_mut::<Call>() {
        let body = x.buffered.as_ref().filter(|b| b.len() <= settings.max_body);
        settings.prompt_strings.note(c.count_prompt(body));
    }
}

/// The answer, its body read for usage (once, whichever remedy asks first).
pub fn meter(x: &mut Exchange, resp: Response<Body>) -> Response<Body> {
    match x.locals.get_mut::<Call>() {
        Some(call) if !call.metering => {
            call.metering = true;
            crate::llm::body::meter(call, resp)
        }
        _ => resp,
    }
}

/// Read LLM calls: their usage, counted by `token_limit` and `budget` and shown by diagnosis (docs/llm.md).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawLlm {
    /// Add `stream_options: {include_usage: true}` to an OpenAI chat completion stream that lacks it, so its usage is counted exactly, and remove what it brings from what the client gets (the usage chunk, and the `"usage":null` OpenAI then writes in every chunk): the client gets the bytes it would have had without the option, relayed an event at a time. `false`: such a stream's output is estimated as a token per content chunk.
    pub add_stream_usage: bool,
    /// Where a token limit or a budget reserves the prompt, count it with the model's public tokenizer (OpenAI's encodings, about 50 MB loaded once, only then); `false`, a model without a public one, or a policy that only reads usage: 1 token per 4 bytes of text.
    pub tokenizer: bool,
    /// Output tokens reserved on admission for a request that sets no `max_tokens` (or `max_completion_tokens`, `max_output_tokens`, `maxOutputTokens`); the answer's usage corrects it.
    pub output_estimate: Int<0, 10_000_000>,
    /// The largest request body read to find the model and estimate the prompt; a larger one is sent as it is, its prompt estimated as 0.
    pub max_body: Size<0, { 64 << 20 }>,
    /// Prices in USD per million tokens by model name, over the shipped table (docs/llm.md#prices); a model is found by its exact name, else the longest name it starts with.
    pub prices: BTreeMap<String, Price>,
    /// Where a call goes when it fails before any byte of its answer reached the client and retry (when the policy has it) stops: each entry another `model`, `account` and/or `upstream`, tried in order (docs/llm.md#fallback). The answer says who answered: `x-tollgate-model`, `x-tollgate-fallback: N`.
    pub fallback: Vec<fallback::RawEntry>,
    /// The failures that move a call to the next entry: statuses (`429`, `"500-599"`), `5xx`, `timeout` (no response head in time), `connect` (never reached the provider), `context_length_exceeded` (a 400 saying the prompt is too long for the model).
    pub fallback_on: Vec<String>,
}

impl Default for RawLlm {
    fn default() -> Self {
        Self {
            add_stream_usage: true,
            tokenizer: true,
            output_estimate: Int::of(1024),
            max_body: Size::bytes(4 << 20),
            prices: BTreeMap::new(),
            fallback: Vec::new(),
            fallback_on: fallback::default_on(),
        }
    }
}
