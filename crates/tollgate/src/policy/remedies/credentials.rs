//! Credentials: a bearer token, basic auth, an API-key header or query parameter, set on
//! every attempt (the last stage, so no secret reaches a cache key, a log line or a
//! metric). Several accounts rotate round robin; an account the provider answered 429 is
//! skipped until its `Retry-After` (or the cooldown) has passed, and a retry after that
//! 429 goes at once to an account that is not cooling down.

use crate::body::Body;
use crate::error::ProxyError;
use crate::fields::units::{DAY_MS, Dur};
use crate::fields::{Errors, as_written};
use crate::policy::chain::{
    Attempt, AttemptRemedy, BoxFuture, Built, Exchange, Hook, Outcome, Phase, Remedy,
};
use crate::policy::compile::Build;
use crate::policy::kind::{Check, Phases, RemedyKind};
use crate::policy::{clock, provider_hints};
use crate::secret::Secret;
use http::uri::PathAndQuery;
use http::{HeaderName, HeaderValue, Request, StatusCode, Uri};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// One account's credential, ready to set.
#[derive(Clone)]
pub enum Credential {
    /// `Authorization` (bearer, basic) or an API-key header; the value marked sensitive.
    Header(HeaderName, HeaderValue),
    /// A query parameter; the value percent-encoded.
    Query(String, Secret),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Header(n, _) => write!(f, "header {n}: MASKED"),
            Credential::Query(n, _) => write!(f, "query {n}=MASKED"),
        }
    }
}

impl Credential {
    pub fn describe(&self) -> String {
        format!("{self:?}")
    }

    pub(crate) fn apply(&self, req: &mut Request<Body>) -> Result<(), ProxyError> {
        match self {
            Credential::Header(n, v) => {
                req.headers_mut().insert(n.clone(), v.clone());
            }
            Credential::Query(name, value) => {
                let uri = req.uri();
                let mut q: Vec<&str> = uri
                    .query()
                    .unwrap_or("")
                    .split('&')
                    .filter(|p| !p.is_empty() && p.split('=').next() != Some(name.as_str()))
                    .collect();
                let pair = format!("{name}={}", value.expose());
                q.push(&pair);
                let pq = PathAndQuery::try_from(format!("{}?{}", uri.path(), q.join("&")))
                    .map_err(|_| ProxyError::BadTarget("credential query parameter".into()))?;
                let mut parts = std::mem::take(req.uri_mut()).into_parts();
                parts.path_and_query = Some(pq);
                *req.uri_mut() =
                    Uri::from_parts(parts).map_err(|e| ProxyError::BadTarget(e.to_string()))?;
            }
        }
        Ok(())
    }
}

pub struct Credentials {
    pub accounts: Vec<Credential>,
    pub cooldown: Duration,
    next: AtomicUsize,
    /// Per account: skipped until this unix-ms instant.
    cooling: Vec<AtomicU64>,
}

impl Credentials {
    pub fn new(accounts: Vec<Credential>, cooldown: Duration) -> Self {
        let cooling = accounts.iter().map(|_| AtomicU64::new(0)).collect();
        Self {
            accounts,
            cooldown,
            next: AtomicUsize::new(0),
            cooling,
        }
    }

    /// The next account in turn that is not cooling down; when all are, the one whose
    /// cooldown ends first.
    fn pick(&self) -> usize {
        let n = self.accounts.len();
        if n == 1 {
            return 0;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let now = clock::now_ms();
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| self.cooling[i].load(Ordering::Relaxed) <= now)
            .unwrap_or_else(|| {
                (0..n)
                    .min_by_key(|&i| self.cooling[i].load(Ordering::Relaxed))
                    .unwrap_or(0)
            })
    }

    /// Whether some account other than `i` is not cooling down now.
    fn another_free(&self, i: usize) -> bool {
        let now = clock::now_ms();
        (0..self.accounts.len()).any(|k| k != i && self.cooling[k].load(Ordering::Relaxed) <= now)
    }

    /// Live state for `GET /policies`: each account's masked description and cooldown.
    pub fn accounts_state(&self) -> serde_json::Value {
        let now = clock::now_ms();
        serde_json::json!(
            self.accounts
                .iter()
                .zip(&self.cooling)
                .map(|(a, c)| {
                    let until = c.load(Ordering::Relaxed);
                    serde_json::json!({
                        "credential": a.describe(),
                        "cooling_down_s": (until > now).then(|| (until - now).div_ceil(1000)),
                    })
                })
                .collect::<Vec<_>>()
        )
    }
}

/// The names and values a diagnosis capture must redact for these accounts: the header
/// or query names, the values, a token on its own, and a basic credential's user id and
/// password (RFC 7617: a provider may quote back either; Stripe's secret key is the user
/// id).
pub fn secrets(accounts: &[Credential], names: &mut Vec<String>, values: &mut Vec<String>) {
    for a in accounts {
        match a {
            Credential::Header(n, v) => {
                names.push(n.as_str().to_owned());
                let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
                if let Some((scheme, token)) = v.split_once(' ') {
                    values.push(token.to_owned());
                    if scheme.eq_ignore_ascii_case("basic") {
                        values.extend(basic_parts(token));
                    }
                }
                values.push(v);
            }
            Credential::Query(n, v) => {
                names.push(n.to_ascii_lowercase());
                values.push(v.expose().to_owned());
                if let Some(decoded) = crate::paths::percent_decode(v.expose()) {
                    values.push(decoded);
                }
            }
        }
    }
}

/// The user id and password of a basic credential's base64 token.
fn basic_parts(token: &str) -> Vec<String> {
    let Ok(raw) = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, token.trim())
    else {
        return Vec::new();
    };
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (user, password) = raw.split_once(':').unwrap_or((&raw, ""));
    vec![user.to_owned(), password.to_owned()]
}

/// The account a request's current attempt used.
#[derive(Default)]
pub struct Account {
    pub used: Option<usize>,
    /// The last attempt's account was told to wait (429) and another is free now: a
    /// retry goes there at once instead of waiting out the tired account's `Retry-After`.
    pub fresh: bool,
}

/// `credentials:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "credentials";
    const PHASES: Phases = Phases {
        request: "",
        attempt: "sets the account's credential on this attempt; after it, notes a 429 for rotation (the retry then goes to a free account at once)",
        response: "",
    };
    const EXAMPLE: &'static str = "{accounts: [{bearer: \"${GITHUB_TOKEN}\"}, {header: {name: x-api-key, value: \"${KEY}\"}}, {basic: {username: \"${USER}\", password: \"${PASS}\"}}, {query: {name: key, value: \"${KEY}\"}}]}";
    type Raw = RawCredentials;
    /// The accounts, and how long one that got 429 without `Retry-After` is skipped.
    type Spec = (Vec<Credential>, Duration);
    type Action = crate::policy::kind::NoActions;
    type Metrics = ();

    fn secrets((accounts, _): &Self::Spec, names: &mut Vec<String>, values: &mut Vec<String>) {
        secrets(accounts, names, values);
    }

    fn validate(c: &RawCredentials, cx: &mut Check<'_>) -> Option<Self::Spec> {
        let e = &mut *cx.errors;
        let at = |f: &str| format!("{}.{f}", cx.path);
        let single = RawAccount {
            bearer: c.bearer.clone(),
            basic: c.basic.clone(),
            header: c.header.clone(),
            query: c.query.clone(),
        };
        let has_single = single.bearer.is_some()
            || single.basic.is_some()
            || single.header.is_some()
            || single.query.is_some();
        let accounts: Vec<_> = match (has_single, c.accounts.is_empty()) {
            (true, true) => credential(e, &cx.path, &single).into_iter().collect(),
            (false, false) => c
                .accounts
                .iter()
                .enumerate()
                .filter_map(|(j, a)| credential(e, &at(&format!("accounts[{j}]")), a))
                .collect(),
            _ => {
                e.fail(
                    &cx.path,
                    "write one credential (`bearer`, `basic`, `header` or `query`) or `accounts: [...]`, not both".into(),
                );
                Vec::new()
            }
        };
        let cooldown = c.cooldown.get();
        (!accounts.is_empty()).then_some((accounts, cooldown))
    }

    fn build((accounts, cooldown): &Self::Spec, _: &mut Build<'_>) -> Built {
        // Built anew on every load: a secret that changed must take effect, and the
        // masked definition cannot tell.
        Built::with_attempts(Arc::new(Credentials::new(accounts.clone(), *cooldown)))
    }
}

impl Remedy for Credentials {
    fn state(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        Some(Box::pin(std::future::ready(
            serde_json::json!({ "accounts": self.accounts_state() }),
        )))
    }

    fn request<'a>(&'a self, _x: &'a mut Exchange) -> Phase<'a> {
        Phase::next()
    }
}

impl AttemptRemedy for Credentials {
    /// Sets an account's credential on this attempt.
    fn before(&self, x: &mut Exchange, a: &mut Attempt) -> Result<(), ProxyError> {
        let i = self.pick();
        // One account has no other to turn to: nothing to keep per request.
        if self.accounts.len() > 1 {
            x.locals.get_or_default::<Account>().used = Some(i);
        }
        self.accounts[i].apply(&mut a.request)
    }

    /// Notes a 429: the account cools down, and a retry goes to a free one at once.
    fn after<'a>(&'a self, x: &'a mut Exchange, o: Outcome<'a>) -> Hook<'a, ()> {
        if self.accounts.len() == 1 {
            return Hook::Now(());
        }
        let account = x.locals.get_or_default::<Account>();
        account.fresh = false;
        if let (Ok(head), Some(i)) = (o, account.used)
            && head.status == StatusCode::TOO_MANY_REQUESTS
            && self.accounts.len() > 1
        {
            let wait = provider_hints::retry_after(&head.headers).unwrap_or(self.cooldown);
            let until = clock::now_ms().saturating_add(wait.as_millis() as u64);
            self.cooling[i].fetch_max(until, Ordering::Relaxed);
            account.fresh = self.another_free(i);
        }
        Hook::Now(())
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawCredentials {
    /// `Authorization: Bearer VALUE`. One credential (`bearer`, `basic`, `header` or `query`) replaces what the client sent under that name.
    pub bearer: Option<crate::fields::SecretText>,
    /// `Authorization: Basic base64(username:password)`.
    pub basic: Option<RawBasic>,
    /// An API key in a request header.
    pub header: Option<RawNamed>,
    /// An API key in a query parameter.
    pub query: Option<RawNamed>,
    /// Several accounts used in turn (round robin), each one of `bearer`, `basic`, `header`, `query`. An account the provider answers **429** is skipped until its `Retry-After` has passed (or `cooldown` when there is none); when all are cooling down, the one free soonest is used. With `retry` (429 in its `statuses`), the retry after such a 429 goes **at once** to an account that is not cooling down: the `Retry-After` was the tired account's, not the provider's as a whole.
    pub accounts: Vec<RawAccount>,
    /// How long an account that got 429 without `Retry-After` is skipped.
    pub cooldown: Dur<0, DAY_MS>,
}

impl Default for RawCredentials {
    fn default() -> Self {
        Self {
            bearer: None,
            basic: None,
            header: None,
            query: None,
            accounts: Vec::new(),
            cooldown: Dur::secs(60),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawAccount {
    /// `Authorization: Bearer VALUE`.
    pub bearer: Option<crate::fields::SecretText>,
    /// `Authorization: Basic base64(username:password)`.
    pub basic: Option<RawBasic>,
    /// An API key in a request header.
    pub header: Option<RawNamed>,
    /// An API key in a query parameter.
    pub query: Option<RawNamed>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBasic {
    pub username: crate::fields::SecretText,
    pub password: crate::fields::SecretText,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawNamed {
    /// Header or query parameter name.
    pub name: String,
    /// Its value; write `${ENV_VAR}`.
    pub value: crate::fields::SecretText,
}

pub fn credential(e: &mut Errors, path: &str, a: &RawAccount) -> Option<Credential> {
    let given = [
        a.bearer.is_some(),
        a.basic.is_some(),
        a.header.is_some(),
        a.query.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        e.fail(
            path,
            "write exactly one of `bearer`, `basic`, `header`, `query`".into(),
        );
        return None;
    }
    let sensitive = |mut v: HeaderValue| {
        v.set_sensitive(true);
        v
    };
    if let Some(b) = &a.bearer {
        let t = e.env(&format!("{path}.bearer"), b)?;
        let v = e.check(
            &format!("{path}.bearer"),
            HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| as_written("the token is not a valid header value".into(), &t, b)),
        )?;
        return Some(Credential::Header(
            http::header::AUTHORIZATION,
            sensitive(v),
        ));
    }
    if let Some(b) = &a.basic {
        let u = e.env(&format!("{path}.basic.username"), &b.username)?;
        let p = e.env(&format!("{path}.basic.password"), &b.password)?;
        let enc = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("{u}:{p}"),
        );
        let v = HeaderValue::from_str(&format!("Basic {enc}")).ok()?;
        return Some(Credential::Header(
            http::header::AUTHORIZATION,
            sensitive(v),
        ));
    }
    if let Some(h) = &a.header {
        let n = e.header_name(&format!("{path}.header.name"), &h.name)?;
        let v = e.env_checked(&format!("{path}.header.value"), &h.value, |v| {
            HeaderValue::from_str(v).map_err(|_| "not a valid header value".to_owned())
        })?;
        return Some(Credential::Header(n, sensitive(v)));
    }
    let q = a.query.as_ref()?;
    let v = e.env(&format!("{path}.query.value"), &q.value)?;
    let encoded = crate::policy::path::percent_encode(&v);
    Some(Credential::Query(q.name.clone(), Secret::new(encoded)))
}
