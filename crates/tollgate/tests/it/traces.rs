//! Traces: a receiver in the test decodes the exported OTLP protobuf. A client's
//! `traceparent` is continued and each provider attempt (a retry its own) gets a child
//! span whose id the provider receives in its `traceparent`; remedy actions are span
//! events; an unsampled client trace passes through untouched.

use crate::support::*;
use http::Request;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An OTLP/HTTP receiver keeping every span it is sent (and the service name).
async fn receiver() -> (Server, Arc<Mutex<Vec<(String, Span)>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let s = spans.clone();
    let server = upstream(move |req: Request<hyper::body::Incoming>| {
        let s = s.clone();
        async move {
            use http_body_util::BodyExt;
            assert_eq!(req.uri().path(), "/v1/traces");
            assert_eq!(req.headers()["content-type"], "application/x-protobuf");
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let export = ExportTraceServiceRequest::decode(body).expect("valid OTLP protobuf");
            for rs in export.resource_spans {
                let resource = rs.resource.unwrap();
                let service = resource
                    .attributes
                    .iter()
                    .find(|a| a.key == "service.name")
                    .expect("the resource names its service");
                let service = format!("{:?}", service.value.clone().unwrap().value.unwrap());
                for ss in rs.scope_spans {
                    for span in ss.spans {
                        s.lock().unwrap().push((service.clone(), span));
                    }
                }
            }
            answer(200, &[], "")
        }
    })
    .await;
    (server, spans)
}

async fn spans_when(spans: &Arc<Mutex<Vec<(String, Span)>>>, n: usize) -> Vec<(String, Span)> {
    for _ in 0..500 {
        if spans.lock().unwrap().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    spans.lock().unwrap().clone()
}

fn attr(s: &Span, key: &str) -> Option<String> {
    s.attributes
        .iter()
        .find(|a| a.key == key)
        .map(|a| format!("{:?}", a.value.clone().unwrap().value.unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_trace_continued_and_each_attempt_its_own_span() {
    let (rx, spans) = receiver().await;
    // The provider fails once, then answers; it records the traceparent it got.
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let s = seen.clone();
    let (up, _) = counting_upstream(move |req, i| {
        let s = s.clone();
        async move {
            s.lock()
                .unwrap()
                .push(req.headers()["traceparent"].to_str().unwrap().to_owned());
            if i == 0 {
                answer(503, &[], "busy")
            } else {
                answer(200, &[], "ok")
            }
        }
    })
    .await;
    let yaml = format!(
        r#"
policies:
  - name: flaky
    match: {{ host: 127.0.0.1 }}
    retry: {{ attempts: 3, base_delay: 1ms, max_delay: 10ms }}
diagnosis:
  traces:
    enabled: true
    endpoint: "http://{}/v1/traces"
    interval: 20ms
    service_name: checkout-egress
"#,
        rx.addr
    );
    let gw = gateway(&yaml).await;
    let parent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let r = get_via(&gw, up.addr, "/pay", &[("traceparent", &parent)]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-tollgate-retries"), Some("1"));

    let got = spans_when(&spans, 3).await;
    assert_eq!(got.len(), 3, "one server span and two attempt spans");
    assert!(got[0].0.contains("checkout-egress"));
    let server: Vec<&Span> = got
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.kind == SpanKind::Server as i32)
        .collect();
    let clients: Vec<&Span> = got
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.kind == SpanKind::Client as i32)
        .collect();
    assert_eq!((server.len(), clients.len()), (1, 2));
    let server = server[0];
    assert_eq!(
        hex(&server.trace_id),
        CLIENT_TRACE,
        "the client's trace is continued"
    );
    assert_eq!(hex(&server.parent_span_id), CLIENT_SPAN);
    assert_eq!(
        attr(server, "http.request.method").unwrap(),
        "StringValue(\"GET\")"
    );
    assert_eq!(
        attr(server, "http.response.status_code").unwrap(),
        "IntValue(200)"
    );
    assert_eq!(
        attr(server, "tollgate.policy").unwrap(),
        "StringValue(\"flaky\")"
    );
    assert!(
        server.events.iter().any(|e| e.name == "retry.retried"),
        "remedy actions are span events"
    );
    assert!(server.end_time_unix_nano >= server.start_time_unix_nano);
    // A traced request's actions carry their time (the clock is read for traced
    // requests only): inside the server span.
    for e in &server.events {
        assert!(
            (server.start_time_unix_nano..=server.end_time_unix_nano).contains(&e.time_unix_nano),
            "event {} at {} outside its span {}..{}",
            e.name,
            e.time_unix_nano,
            server.start_time_unix_nano,
            server.end_time_unix_nano
        );
    }

    // Each attempt's span id is what the provider got in its traceparent.
    let sent = seen.lock().unwrap().clone();
    assert_eq!(sent.len(), 2);
    for (i, c) in clients.iter().enumerate() {
        assert_eq!(hex(&c.trace_id), CLIENT_TRACE);
        assert_eq!(
            c.parent_span_id, server.span_id,
            "attempts are children of the server span"
        );
        assert!(
            sent.contains(&format!("00-{CLIENT_TRACE}-{}-01", hex(&c.span_id))),
            "{sent:?}"
        );
        assert!(attr(c, "http.request.resend_count").is_some(), "{i}");
    }
    assert_ne!(clients[0].span_id, clients[1].span_id);
    let codes: Vec<String> = clients
        .iter()
        .map(|c| attr(c, "http.response.status_code").unwrap())
        .collect();
    assert!(
        codes.contains(&"IntValue(503)".to_owned()) && codes.contains(&"IntValue(200)".to_owned())
    );
    // Spans, not calls: the server span and its two attempts.
    let m = metrics_when(&gw, |m| m.contains("tollgate_spans_exported_total 3")).await;
    assert!(m.contains("tollgate_spans_exported_total 3"), "{m}");
    assert!(m.contains("tollgate_spans_dropped_total 0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_traces_start_and_unsampled_ones_pass_through() {
    let (rx, spans) = receiver().await;
    let seen = Arc::new(Mutex::new(Vec::<Option<String>>::new()));
    let s = seen.clone();
    let up = upstream(move |req: Request<hyper::body::Incoming>| {
        let s = s.clone();
        async move {
            s.lock().unwrap().push(
                req.headers()
                    .get("traceparent")
                    .map(|v| v.to_str().unwrap().to_owned()),
            );
            answer(200, &[], "ok")
        }
    })
    .await;
    let yaml = format!(
        "diagnosis:\n  traces:\n    enabled: true\n    endpoint: \"http://{}/v1/traces\"\n    interval: 20ms\n",
        rx.addr
    );
    let gw = gateway(&yaml).await;
    // No traceparent: a trace starts here (sample 1.0), the provider gets it.
    assert_eq!(get_via(&gw, up.addr, "/a", &[]).await.status, 200);
    // Unsampled by the client: not recorded, its header passes through as it was.
    let unsampled = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-00");
    assert_eq!(
        get_via(&gw, up.addr, "/b", &[("traceparent", &unsampled)])
            .await
            .status,
        200
    );
    let got = spans_when(&spans, 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        spans.lock().unwrap().len(),
        2,
        "the unsampled request made no spans"
    );
    let seen = seen.lock().unwrap().clone();
    let started = seen[0].clone().expect("a started trace is propagated");
    let server = got
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.kind == SpanKind::Server as i32)
        .unwrap();
    assert!(server.parent_span_id.is_empty(), "a root span");
    assert!(started.starts_with(&format!("00-{}-", hex(&server.trace_id))));
    assert!(started.ends_with("-01"));
    assert_eq!(seen[1].as_deref(), Some(unsampled.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_s_span_is_named_for_its_tool() {
    let (rx, spans) = receiver().await;
    let up = upstream(|_req| async {
        answer(
            200,
            &[("content-type", "application/json")],
            r#"{"jsonrpc":"2.0","id":"c-7","result":{"content":[],"isError":false}}"#,
        )
    })
    .await;
    let gw = gateway(&format!(
        "routes:\n  - prefix: /mcp\n    upstream: http://{}\npolicies:\n  - name: tools\n    mcp: {{}}\ndiagnosis:\n  traces:\n    enabled: true\n    endpoint: \"http://{}/v1/traces\"\n    interval: 20ms\n",
        up.addr, rx.addr
    ))
    .await;
    let body = r#"{"jsonrpc":"2.0","id":"c-7","method":"tools/call","params":{"name":"create_issue","arguments":{}}}"#;
    let req = Request::post(format!("http://{}/mcp/", gw.proxy_addr))
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
        .body(bytes_body(body))
        .unwrap();
    assert_eq!(send(&client(), req).await.status, 200);
    let got = spans_when(&spans, 2).await;
    let server = got
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.kind == SpanKind::Server as i32)
        .expect("a server span");
    assert_eq!(server.name, "tools/call create_issue");
    assert_eq!(
        attr(server, "mcp.method.name").unwrap(),
        r#"StringValue("tools/call")"#
    );
    assert_eq!(
        attr(server, "gen_ai.tool.name").unwrap(),
        r#"StringValue("create_issue")"#
    );
    assert_eq!(
        attr(server, "jsonrpc.request.id").unwrap(),
        r#"StringValue("c-7")"#
    );
}
