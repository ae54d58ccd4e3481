//! The access log: one line per request, written off the hot path, with the matched policy.

use crate::support::*;
use http::Request;

#[tokio::test]
async fn json_access_log_lines_carry_request_facts() {
    let up = echo_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let gw = gateway(&format!(
        "log:\n  access_log: true\n  access_log_file: {}\n  format: json\npolicies:\n  - name: items\n    match:\n      path: /v1/items/{{id}}\n",
        path.display()
    ))
    .await;
    let c = client();
    let req = via_header(&gw, up.addr, "/v1/items/7?secret=1")
        .header("x-tollgate-request-id", "rid-1")
        .body(empty())
        .unwrap();
    send(&c, req).await;
    send(
        &c,
        Request::get(format!("http://{}/none", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    let lines: Vec<String> = eventually("two access log lines", || async {
        let lines: Vec<String> = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        if lines.len() >= 2 {
            Ok(lines)
        } else {
            Err(lines)
        }
    })
    .await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    let ok: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(ok["request_id"], "rid-1");
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["policy"], "items");
    assert_eq!(
        ok["path"], "/v1/items/7",
        "query strings (often secrets) are not logged"
    );
    assert_eq!(ok["host"], "127.0.0.1");
    assert_eq!(ok["completed"], true);
    assert!(ok["body_bytes"].as_u64().unwrap() > 0);
    let err: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(
        (err["status"].as_u64(), err["error"].as_str()),
        (Some(400), Some("missing_target"))
    );
}
