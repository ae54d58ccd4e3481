//! `llm.fallback`: when a call fails before any byte of its answer reached the client
//! (429, a 5xx, a timeout or refused connection, or `context_length_exceeded`) and the
//! attempts layer (retry, when the policy has one) stops, the same request goes to the
//! next entry of the list: another model (the JSON `model` rewritten, or Gemini's path),
//! another account's credential, another OpenAI-compatible provider — or any of them
//! together. The answer says who answered (`x-tollgate-model`, `x-tollgate-fallback`).

use crate::body::{Body, full};
use crate::error::ProxyError;
use crate::fields::Errors;
use crate::llm::{Api, Call};
use crate::policy::chain::{Attempt, AttemptRemedy, BoxFuture, Exchange, Fallback};
use crate::policy::failure::{Failure, Statuses, classify};
use crate::policy::remedies::credentials::{Credential, RawAccount, credential};
use crate::routes::Route;
use crate::target::Target;
use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{HeaderValue, Response, header};
use http_body::Body as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One entry of the list, validated.
#[derive(Debug, Clone)]
pub struct Entry {
    pub model: Option<String>,
    pub account: Option<Credential>,
    /// Another provider: its target and base path.
    pub upstream: Option<(Target, String)>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        // Credentials are compared by their debug form (masked): a changed key still
        // rebuilds the remedy, as every build does.
        self.model == other.model
            && format!("{:?}", self.account) == format!("{:?}", other.account)
            && self
                .upstream
                .as_ref()
                .map(|(t, p)| (t.authority.to_string(), p))
                == other
                    .upstream
                    .as_ref()
                    .map(|(t, p)| (t.authority.to_string(), p))
    }
}

/// What sends a call on: the list, and the failures that do.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub entries: Vec<Entry>,
    pub statuses: Statuses,
    pub timeouts: bool,
    pub connect: bool,
    pub context_length: bool,
}

/// Which entry the call is on (0: the request as sent), a per-request local.
#[derive(Default, Clone, Copy)]
pub struct At(pub usize);

/// The fallback of a policy: decides (as [`Fallback`]) and rewrites each attempt (as
/// [`AttemptRemedy`]).
pub struct Fallbacks(pub Spec);

/// An error body read to find `context_length_exceeded` is at most this long.
const ERROR_BODY: u64 = 64 << 10;

impl Fallbacks {
    /// Whether `o` is a failure the list moves on for.
    async fn triggered(&self, api: Api, o: &mut Result<Response<Body>, ProxyError>) -> bool {
        let s = &self.0;
        match o {
            Err(e) => match classify(e) {
                Failure::NotSent => s.connect,
                Failure::Timeout => s.timeouts,
                Failure::AfterSending => s.connect,
                Failure::Ours => false,
            },
            Ok(r) if s.statuses.contains(r.status().as_u16()) => true,
            Ok(r) if s.context_length && r.status() == http::StatusCode::BAD_REQUEST => {
                let small = r
                    .body()
                    .size_hint()
                    .upper()
                    .is_some_and(|n| n <= ERROR_BODY);
                if !small {
                    return false;
                }
                let body = std::mem::replace(r.body_mut(), crate::body::empty());
                let bytes = crate::body::read_capped(body, ERROR_BODY as usize)
                    .await
                    .unwrap_or_default();
                let found = api.too_long(&bytes);
                *r.body_mut() = full(bytes);
                found
            }
            Ok(_) => false,
        }
    }
}

impl Fallback for Fallbacks {
    fn next<'a>(
        &'a self,
        x: &'a mut Exchange,
        o: &'a mut Result<Response<Body>, ProxyError>,
    ) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let at = x.locals.get::<At>().map_or(0, |a| a.0);
            // Only an LLM call whose body is kept can be sent again.
            let Some(api) = x.locals.get::<Call>().map(|c| c.api) else {
                return false;
            };
            if at >= self.0.entries.len() || x.buffered.is_none() {
                return false;
            }
            if !self.triggered(api, o).await {
                return false;
            }
            x.locals.insert(At(at + 1));
            true
        })
    }
}

impl AttemptRemedy for Fallbacks {
    fn before(&self, x: &mut Exchange, a: &mut Attempt) -> Result<(), ProxyError> {
        match x.locals.get::<At>().map(|a| a.0) {
            Some(at) if at > 0 => self.rewrite(x, a, at),
            _ => Ok(()),
        }
    }
}

impl Fallbacks {
    /// Makes attempt `a` the request of entry `at` (1 for the list's first).
    fn rewrite(&self, x: &mut Exchange, a: &mut Attempt, at: usize) -> Result<(), ProxyError> {
        let Some(e) = self.0.entries.get(at - 1) else {
            return Ok(());
        };
        let api = x.locals.get::<Call>().map(|c| c.api);
        let mut pq: String = a
            .request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        if let Some(model) = &e.model {
            match api.and_then(|a| a.path_with_model(&pq, model)) {
                Some(p) => pq = p,
                None => {
                    if let Some(b) = x.buffered.as_ref().and_then(|b| with_model(b, model)) {
                        a.request
                            .headers_mut()
                            .insert(header::CONTENT_LENGTH, b.len().into());
                        *a.request.body_mut() = full(b);
                    }
                }
            }
            if let Some(c) = x.locals.get::<Call>() {
                let m: Arc<str> = Arc::from(model.as_str());
                c.meter.update(|s| s.requested = Some(m));
            }
        }
        if let Some(c) = x.locals.get::<Call>() {
            c.meter.update(|s| s.fallback = at as u32);
        }
        if let Some((target, base)) = &e.upstream {
            x.target = target.clone();
            pq = format!("{base}{pq}");
        }
        let pq = PathAndQuery::try_from(pq).map_err(|e| ProxyError::BadTarget(e.to_string()))?;
        *a.request.uri_mut() =
            crate::target::upstream_uri(&x.target, pq, a.request.headers_mut(), false)?;
        if let Some(c) = &e.account {
            c.apply(&mut a.request)?;
        }
        Ok(())
    }
}

/// The model of entry `at` for `x-tollgate-model`: the entry's, else the request's.
pub fn model_of(spec: &Spec, x: &Exchange) -> Option<HeaderValue> {
    let at = x.locals.get::<At>().map_or(0, |a| a.0);
    let m = match at {
        0 => None,
        n => spec.entries.get(n - 1).and_then(|e| e.model.clone()),
    };
    let m = m.or_else(|| x.locals.get::<Call>()?.model.as_deref().map(str::to_owned))?;
    HeaderValue::try_from(m).ok()
}

/// Which entry answered, for `x-tollgate-fallback`.
pub fn entry_of(x: &Exchange) -> usize {
    x.locals.get::<At>().map_or(0, |a| a.0)
}

/// The JSON body with its top-level `model` set to `model` (written again; the rest of
/// the values as they were, numbers included).
fn with_model(body: &Bytes, model: &str) -> Option<Bytes> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.as_object_mut()?
        .insert("model".into(), serde_json::Value::String(model.to_owned()));
    serde_json::to_vec(&v).ok().map(Bytes::from)
}

// ---- config: as written, and its validation ----

/// One alternative: another model, another account, another provider, or several of them.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEntry {
    /// The model to ask for instead: the JSON body's `model` (Gemini: the path's).
    pub model: Option<String>,
    /// Another account's credential (`{bearer: ${BACKUP_KEY}}`, `{header: {name: x-api-key, value: …}}`), set on this entry's attempts. A policy's `credentials:` sets its own on every attempt after it.
    pub account: Option<RawAccount>,
    /// Another OpenAI-compatible provider's base URL (`https://openrouter.ai/api`): the request's path is sent under it.
    pub upstream: Option<String>,
}

/// Validates `llm.fallback` and `llm.fallback_on`.
pub fn spec(e: &mut Errors, path: &str, list: &[RawEntry], on: &[String]) -> Option<Spec> {
    if list.is_empty() {
        return None;
    }
    let mut entries = Vec::new();
    for (i, r) in list.iter().enumerate() {
        let at = format!("{path}.fallback[{i}]");
        if r.model.is_none() && r.account.is_none() && r.upstream.is_none() {
            e.fail(
                &at,
                "write what this entry changes: `model`, `account` and/or `upstream`".into(),
            );
        }
        let account = r
            .account
            .as_ref()
            .and_then(|a| credential(e, &format!("{at}.account"), a));
        let upstream = r.upstream.as_ref().and_then(|u| {
            e.env_checked_at(&format!("{at}.upstream"), &at, u, |url| {
                Route::new("/", url, u).map(|r| (r.target, r.base_path))
            })
        });
        entries.push(Entry {
            model: r.model.clone(),
            account,
            upstream,
        });
    }
    let (mut statuses, mut timeouts, mut connect, mut context_length) =
        (Vec::new(), false, false, false);
    for (i, w) in on.iter().enumerate() {
        match w.as_str() {
            "timeout" => timeouts = true,
            "connect" => connect = true,
            "context_length_exceeded" => context_length = true,
            "5xx" => statuses.push("500-599".to_owned()),
            other => match Statuses::parse(&[other.to_owned()]) {
                Ok(_) => statuses.push(other.to_owned()),
                Err(m) => e.fail(
                    &format!("{path}.fallback_on[{i}]"),
                    format!("{m}, or `5xx`, `timeout`, `connect`, `context_length_exceeded`"),
                ),
            },
        }
    }
    Some(Spec {
        entries,
        statuses: Statuses::parse(&statuses).unwrap_or_default(),
        timeouts,
        connect,
        context_length,
    })
}

/// `fallback_on`'s default: every failure a fallback helps with.
pub fn default_on() -> Vec<String> {
    [
        "429",
        "5xx",
        "timeout",
        "connect",
        "context_length_exceeded",
    ]
    .map(String::from)
    .to_vec()
}
