//! `header_guard`, the remedy added as one module and one registry line: a request
//! lacking a required header is refused with 400 before anything else runs, a request
//! carrying it goes through, and its config errors name the field.

use crate::support::*;
use std::sync::atomic::Ordering;

#[tokio::test]
async fn a_request_lacking_a_required_header_is_refused_before_the_provider() {
    let (up, hits) = counting_upstream(|req, _| echo_json(req)).await;
    let gw = gateway(
        "policies:\n  - name: attributed\n    match: {path: '/v1/*'}\n    header_guard: {require: [x-app-id, x-team]}\n    request: {set_headers: {x-team: added-by-policy}}\n",
    )
    .await;
    let missing = get_via(&gw, up.addr, "/v1/chat", &[("x-app-id", "billing")]).await;
    assert_eq!(missing.status, 400, "{:?}", missing.body);
    assert_eq!(missing.header("x-tollgate-error"), Some("bad_request"));
    let message = missing.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("`x-team`") && message.contains("`attributed`"),
        "{message}"
    );
    // Blank counts as missing; the policy's own transform does not satisfy it.
    let blank = get_via(
        &gw,
        up.addr,
        "/v1/chat",
        &[("x-app-id", " "), ("x-team", "a")],
    )
    .await;
    assert_eq!(blank.status, 400);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "refused requests never reach the provider"
    );
    let ok = get_via(
        &gw,
        up.addr,
        "/v1/chat",
        &[("x-app-id", "billing"), ("x-team", "a")],
    )
    .await;
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    let sent = ok.json()["headers"].clone();
    for pair in [["x-app-id", "billing"], ["x-team", "added-by-policy"]] {
        assert!(
            sent.as_array().unwrap().contains(&serde_json::json!(pair)),
            "{pair:?} not in {sent}"
        );
    }
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // Unmatched paths are not guarded.
    assert_eq!(get_via(&gw, up.addr, "/other", &[]).await.status, 200);
    // Counted, listed in the chain, in order.
    let metrics = String::from_utf8(admin_get(&gw, "/metrics").await.body.to_vec()).unwrap();
    for (action, n) in [("rejected", 2), ("allowed", 1)] {
        let line = format!(
            "tollgate_remedy_actions_total{{policy=\"attributed\",remedy=\"header_guard\",action=\"{action}\"}} {n}"
        );
        assert!(metrics.contains(&line), "no `{line}` in /metrics");
    }
    let policies = admin_get(&gw, "/policies").await.json();
    assert_eq!(
        policies["policies"][0]["remedies"],
        serde_json::json!(["header_guard", "request_transform"])
    );
    let config = admin_get(&gw, "/config").await.json();
    assert_eq!(
        config["policies"][0]["header_guard"]["require"],
        serde_json::json!(["x-app-id", "x-team"])
    );
}

#[test]
fn header_guard_config_errors_name_the_field() {
    let errors = |yaml: &str| {
        tollgate::Config::from_yaml(yaml)
            .unwrap_err()
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    };
    let e = errors("policies:\n  - name: p\n    header_guard: {require: []}\n");
    assert!(
        e[0].starts_with("policies[0].header_guard.require: list at least one header"),
        "{e:?}"
    );
    let e = errors("policies:\n  - name: p\n    header_guard: {require: [ok, 'bad header']}\n");
    assert!(
        e[0].starts_with("policies[0].header_guard.require[1]: "),
        "{e:?}"
    );
    let e = errors("policies:\n  - name: p\n    header_guard: {required: [x]}\n");
    assert!(
        e[0].contains("policies[0].header_guard") && e[0].contains("unknown field `required`"),
        "{e:?}"
    );
}
