//! Remedies tested as tower and linkerd test their layers: the policy engine runs a
//! compiled chain against a scripted provider (a [`Sender`] that answers from a list and
//! notes when each attempt was sent), on tokio's paused clock, without a socket. Waits
//! are exact: a `Retry-After: 7` is seven seconds to the millisecond.

use http::{Request, Response};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tollgate::body::{Body, full};
use tollgate::error::ProxyError;
use tollgate::policy::chain::Exchange;
use tollgate::policy::engine;
use tollgate::policy::store::{Store, memory::Memory};
use tollgate::target::{Scheme, Target};
use tollgate::upstream::deadline::ResponseTimer;
use tollgate::upstream::{AttemptSettings, Sender};

/// A scripted answer: a status and its headers.
type Answer = (u16, Vec<(&'static str, &'static str)>);

/// Scripted answers as written in a test.
type Answers = [(u16, &'static [(&'static str, &'static str)])];

/// A provider that answers each attempt with the next scripted status and headers.
#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<Answer>>,
    /// When each attempt was sent, and its settings.
    sent: Mutex<Vec<(Instant, AttemptSettings)>>,
    /// Each attempt's request header fields, in order.
    heads: Mutex<Vec<Vec<(String, String)>>>,
}

impl Script {
    fn new(answers: &[(u16, &[(&'static str, &'static str)])]) -> Self {
        Self {
            answers: Mutex::new(answers.iter().map(|(s, h)| (*s, h.to_vec())).collect()),
            sent: Mutex::default(),
            heads: Mutex::default(),
        }
    }

    fn sent_at(&self) -> Vec<Instant> {
        self.sent.lock().unwrap().iter().map(|(t, _)| *t).collect()
    }
}

impl Sender for Script {
    fn send_attempt<'a>(
        &'a self,
        req: Request<Body>,
        _target: &'a Target,
        _timer: &'a ResponseTimer,
        _sent: Instant,
        settings: AttemptSettings,
    ) -> impl Future<Output = Result<Response<Body>, ProxyError>> + Send + 'a {
        self.sent.lock().unwrap().push((Instant::now(), settings));
        self.heads.lock().unwrap().push(fields(req.headers()));
        let (status, headers) = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("the script has an answer for every attempt");
        let mut r = Response::new(full(format!("answer {status}")));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
        for (n, v) in headers {
            r.headers_mut().insert(n, v.parse().unwrap());
        }
        std::future::ready(Ok(r))
    }

    fn response_timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
}

/// The first policy of `yaml`, compiled, with its store.
fn engine(yaml: &str) -> tollgate::policy::Engine {
    let config = tollgate::Config::from_yaml(yaml).unwrap();
    let store: Arc<dyn Store> = Arc::new(Memory::default());
    tollgate::policy::Engine::build(
        &config.policies,
        None,
        &store,
        &tollgate::metrics::Metrics::default(),
    )
}

/// The exchange of one GET the engine's first chain matched.
fn exchange(e: &tollgate::policy::Engine) -> Box<Exchange> {
    let req = Request::get("http://api.example.com/v1/x")
        .body(tollgate::body::empty())
        .unwrap();
    let target = Target::parse(Scheme::Http, "api.example.com").unwrap();
    Box::new(Exchange::new(e.chains[0].clone(), req, target))
}

/// One GET through the engine's first chain.
async fn request(
    e: &tollgate::policy::Engine,
    script: &Script,
) -> Result<Response<Body>, ProxyError> {
    request_as(e, script, false).await
}

/// One GET through the engine's first chain: `plain`, as the proxy listener sends a plain
/// chain's request (in the request's own future, `engine::run_plain`), else as `run` does.
async fn request_as(
    e: &tollgate::policy::Engine,
    script: &Script,
    plain: bool,
) -> Result<Response<Body>, ProxyError> {
    let (x, timer) = (exchange(e), ResponseTimer::default());
    let done = match plain {
        true => engine::run_plain(x, script, &timer, &mut None).await,
        false => engine::run(x, script, &timer, &mut None).await,
    };
    done.map(|d| d.response.map(http_body_util::BodyExt::boxed_unsync))
}

/// What a client sees of an outcome: the status (a proxy-made error's too) and the header
/// fields, in order.
fn seen(r: Result<Response<Body>, ProxyError>) -> (u16, Vec<(String, String)>) {
    let r = r.unwrap_or_else(|e| e.to_response(&http::HeaderValue::from_static("id")));
    (r.status().as_u16(), fields(r.headers()))
}

/// Header fields as names and values, in order.
fn fields(h: &http::HeaderMap) -> Vec<(String, String)> {
    h.iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_plain_chain_runs_in_the_requests_own_future_as_the_engine_runs_it() {
    let policy = |remedies: &str| format!("policies:\n  - name: p\n{remedies}");
    // What makes a chain plain: one attempt (through its attempt stack, if it has one),
    // and nothing that sends, waits for or bounds more than one.
    const CREDENTIALS: &str = "    credentials: {header: {name: x-api-key, value: k1}}\n";
    const BREAKER: &str = "    breaker: {consecutive_failures: 2, open_for: 30s}\n";
    const RESPONSE_TIMEOUT: &str = "    timeouts: {response: 5s}\n";
    for (remedies, plain) in [
        ("    rate_limit: {limit: 1, window: minute}\n", true),
        (
            "    cache: {ttl: 1h}\n    rate_limit: {limit: 5, window: day}\n",
            true,
        ),
        (CREDENTIALS, true),
        (BREAKER, true),
        (RESPONSE_TIMEOUT, true),
        ("    retry: {statuses: ['503']}\n", false),
        ("    timeouts: {total: 5s}\n", false),
        ("    timeouts: {response: 5s, total: 9s}\n", false),
    ] {
        assert_eq!(
            engine(&policy(remedies)).chains[0].plain(),
            plain,
            "{remedies}"
        );
    }
    // The same requests through `run` and through `run_plain`, each on an engine of its
    // own: the same answers, the same fields in the same order, the same attempts with
    // the same request fields and settings. A breaker's third request is refused without
    // an attempt (the first two failed), as it is through `run`.
    let credentials = || vec![("x-api-key".to_owned(), "k1".to_owned())];
    let upstream_timeout = (Duration::from_secs(60), None, true);
    let two_oks_and_a_503: &Answers = &[
        (200, &[("cache-control", "max-age=60")]),
        (200, &[]),
        (503, &[]),
    ];
    let cases: [(&str, &Answers, _, _); 5] = [
        (
            "    rate_limit: {limit: 2, window: minute}\n",
            two_oks_and_a_503,
            vec![upstream_timeout; 2],
            vec![vec![]; 2],
        ),
        (
            "    cache: {ttl: 1h}\n    rate_limit: {limit: 5, window: day}\n",
            two_oks_and_a_503,
            vec![upstream_timeout; 3],
            vec![vec![]; 3],
        ),
        (
            CREDENTIALS,
            two_oks_and_a_503,
            vec![upstream_timeout; 3],
            vec![credentials(); 3],
        ),
        (
            BREAKER,
            &[(500, &[]), (500, &[])],
            vec![upstream_timeout; 2],
            vec![vec![]; 2],
        ),
        (
            RESPONSE_TIMEOUT,
            two_oks_and_a_503,
            vec![(Duration::from_secs(5), None, true); 3],
            vec![vec![]; 3],
        ),
    ];
    for (remedies, answers, settings_sent, heads_sent) in cases {
        let (layered, plain) = (engine(&policy(remedies)), engine(&policy(remedies)));
        let (s1, s2) = (Script::new(answers), Script::new(answers));
        for i in 0..3 {
            let a = seen(request(&layered, &s1).await);
            let b = seen(request_as(&plain, &s2, true).await);
            assert_eq!(a, b, "{remedies}: request {i}");
        }
        let settings = |s: &Script| {
            let sent = s.sent.lock().unwrap();
            sent.iter()
                .map(|(_, a)| (a.response_timeout, a.connect_timeout, a.resend_lost))
                .collect::<Vec<_>>()
        };
        let heads = |s: &Script| s.heads.lock().unwrap().clone();
        for s in [&s1, &s2] {
            assert_eq!(settings(s), settings_sent, "{remedies}");
            assert_eq!(heads(s), heads_sent, "{remedies}");
        }
    }
}

fn header<'a>(r: &'a Response<Body>, name: &str) -> Option<&'a str> {
    r.headers().get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test(start_paused = true)]
async fn retry_waits_exactly_the_providers_retry_after() {
    let e = engine(
        "policies:\n  - name: p\n    retry: {statuses: ['503'], max_delay: 10s, budget_min: 100}\n    timeouts: {connect: 2s, response: 9s}\n",
    );
    let script = Script::new(&[(503, &[("retry-after", "7")]), (200, &[])]);
    let r = request(&e, &script).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-tollgate-retries"), Some("1"));
    let at = script.sent_at();
    assert_eq!(at.len(), 2);
    assert_eq!(at[1] - at[0], Duration::from_secs(7));
    // Each attempt carries the policy's settings, and word not to resend by itself.
    for (_, s) in script.sent.lock().unwrap().iter() {
        assert_eq!(s.connect_timeout, Some(Duration::from_secs(2)));
        assert_eq!(s.response_timeout, Duration::from_secs(9));
        assert!(!s.resend_lost);
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_past_the_cap_is_relayed_and_the_client_told_not_to_retry() {
    let e = engine(
        "policies:\n  - name: p\n    retry: {statuses: ['503'], max_delay: 5s, budget_min: 100}\n",
    );
    let script = Script::new(&[(503, &[("retry-after", "60")])]);
    let start = Instant::now();
    let r = request(&e, &script).await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(header(&r, "x-should-retry"), Some("false"));
    assert_eq!(header(&r, "retry-after"), Some("60"), "relayed untouched");
    assert_eq!(script.sent_at().len(), 1);
    assert_eq!(Instant::now(), start, "no time spent waiting");
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opens_refuses_without_sending_and_closes_after_a_probe() {
    let e =
        engine("policies:\n  - name: p\n    breaker: {consecutive_failures: 2, open_for: 30s}\n");
    let script = Script::new(&[(500, &[]), (500, &[]), (200, &[])]);
    for _ in 0..2 {
        assert_eq!(request(&e, &script).await.unwrap().status(), 500);
    }
    let refused = request(&e, &script).await.unwrap_err();
    assert!(
        refused.to_string().contains("open"),
        "refused as open: {refused}"
    );
    assert_eq!(script.sent_at().len(), 2, "an open breaker sends nothing");
    tokio::time::advance(Duration::from_secs(29)).await;
    assert!(request(&e, &script).await.is_err(), "still open at 29 s");
    // Past `open_for` (its end is kept to the millisecond): half-open.
    tokio::time::advance(Duration::from_millis(1001)).await;
    assert_eq!(
        request(&e, &script).await.unwrap().status(),
        200,
        "the probe"
    );
    assert_eq!(script.sent_at().len(), 3);
    // Closed: the next one goes out at once.
    script.answers.lock().unwrap().push_back((200, Vec::new()));
    assert_eq!(request(&e, &script).await.unwrap().status(), 200);
}

#[tokio::test(start_paused = true)]
async fn the_total_timeout_frames_attempts_and_backoffs() {
    let e = engine(
        "policies:\n  - name: p\n    timeouts: {total: 10s}\n    retry: {statuses: ['503'], max_delay: 1h, budget_min: 100}\n",
    );
    // The provider asks for 8 s twice: the second wait would end past the 10 s total.
    let script = Script::new(&[
        (503, &[("retry-after", "8")]),
        (503, &[("retry-after", "8")]),
        (200, &[]),
    ]);
    let start = Instant::now();
    let err = request(&e, &script).await.unwrap_err();
    assert_eq!(err.code(), "upstream_timeout", "{err}");
    assert_eq!(Instant::now() - start, Duration::from_secs(10));
    assert_eq!(script.sent_at().len(), 2);
}
