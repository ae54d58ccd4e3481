//! Spans exported over OTLP/gRPC through opentelemetry-otlp, configured the standard way:
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, `_PROTOCOL`, `_HEADERS`, `OTEL_SERVICE_NAME` and
//! `OTEL_RESOURCE_ATTRIBUTES` set for `tollgate run`, with nothing but `enabled` in the
//! config; and the same from the config alone. The receiver is a gRPC server of the
//! test's own (HTTP/2, length-prefixed protobuf, `grpc-status` trailer).

use super::{get, provider, run_on_ephemeral_ports, signal, spawn};
use bytes::Bytes;
use http_body_util::BodyExt;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What one export carried: its request headers (gRPC metadata) and message.
type Received = Arc<Mutex<Vec<(http::HeaderMap, ExportTraceServiceRequest)>>>;

/// An OTLP/gRPC trace receiver on a thread of its own; its address and what it got.
fn receiver() -> (std::net::SocketAddr, Received) {
    let got: Received = Arc::default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let g = got.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let g = g.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let g = g.clone();
                            async move {
                                assert_eq!(
                                    req.uri().path(),
                                    "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
                                );
                                let (parts, body) = req.into_parts();
                                let body = body.collect().await.unwrap().to_bytes();
                                // gRPC framing: a compression flag, a 4-byte length, the message.
                                let msg = ExportTraceServiceRequest::decode(body.slice(5..))
                                    .expect("valid OTLP protobuf");
                                g.lock().unwrap().push((parts.headers, msg));
                                let mut trailers = http::HeaderMap::new();
                                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                                let body =
                                    http_body_util::Full::new(Bytes::from_static(&[0, 0, 0, 0, 0]))
                                        .with_trailers(async move { Some(Ok(trailers)) });
                                Ok::<_, std::convert::Infallible>(
                                    http::Response::builder()
                                        .header("content-type", "application/grpc")
                                        .body(body)
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
                });
            }
        });
    });
    (addr, got)
}

/// The string attributes of a resource or span, by key.
fn attrs(list: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> Vec<(String, String)> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    list.iter()
        .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some((kv.key.clone(), s.clone())),
            _ => None,
        })
        .collect()
}

/// Runs a gateway with `config` and `env`, makes one call, and returns the first export.
fn one_export(
    dir: &std::path::Path,
    config: &str,
    env: &[(&str, String)],
    received: &Received,
) -> (http::HeaderMap, ExportTraceServiceRequest) {
    let (mut provider, p) = provider();
    let cfg = dir.join("traces.yaml");
    std::fs::write(
        &cfg,
        format!(
            "routes:\n  - prefix: /api\n    upstream: http://{}\n{config}",
            p[0]
        ),
    )
    .unwrap();
    let mut cmd = run_on_ephemeral_ports(&cfg);
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let (mut gw, a) = spawn(&mut cmd, "tollgate listening:");
    let (status, _) = get(&a[0], "/api/get", &[]);
    assert!(status.contains(" 200 "), "{status}");
    let mut first = None;
    for _ in 0..1000 {
        if let Some(e) = received.lock().unwrap().first().cloned() {
            first = Some(e);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(&gw, "-TERM");
    let _ = gw.wait();
    let _ = provider.kill();
    let _ = provider.wait();
    first.expect("the gateway exported its span over gRPC within 10 s")
}

#[test]
fn spans_go_over_grpc_as_the_standard_otel_variables_say() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, received) = receiver();
    let (headers, export) = one_export(
        dir.path(),
        "diagnosis:\n  traces:\n    enabled: true\n    interval: 20ms\n",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-api-key=s3cret,x-tenant=acme".into(),
            ),
            ("OTEL_SERVICE_NAME", "checkout".into()),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod,team=payments".into(),
            ),
        ],
        &received,
    );
    assert_eq!(headers["x-api-key"], "s3cret");
    assert_eq!(headers["x-tenant"], "acme");
    let rs = &export.resource_spans[0];
    let resource = attrs(&rs.resource.as_ref().unwrap().attributes);
    for (k, v) in [
        ("service.name", "checkout"),
        ("deployment.environment", "prod"),
        ("team", "payments"),
    ] {
        assert!(
            resource.contains(&(k.to_owned(), v.to_owned())),
            "{k}={v} in {resource:?}"
        );
    }
    let span = &rs.scope_spans[0].spans[0];
    assert_eq!(span.name, "GET");
    assert!(attrs(&span.attributes).contains(&("url.path".into(), "/get".into())));
}

#[test]
fn the_config_alone_names_grpc_its_endpoint_headers_and_service() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, received) = receiver();
    let (headers, export) = one_export(
        dir.path(),
        &format!(
            "diagnosis:\n  traces:\n    enabled: true\n    interval: 20ms\n    protocol: grpc\n    endpoint: http://{addr}\n    headers: {{x-api-key: from-config}}\n    service_name: egress\n"
        ),
        &[(
            "OTEL_SERVICE_NAME",
            "ignored-when-the-config-names-one".into(),
        )],
        &received,
    );
    assert_eq!(headers["x-api-key"], "from-config");
    let resource = attrs(
        &export.resource_spans[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes,
    );
    assert!(
        resource.contains(&("service.name".into(), "egress".into())),
        "{resource:?}"
    );
}
