//! Finished spans as an OTLP `ExportTraceServiceRequest` (protobuf, for OTLP/HTTP's
//! `application/x-protobuf`), with the HTTP semantic-convention attributes
//! (https://opentelemetry.io/docs/specs/semconv/http/http-spans/).

use super::Finished;
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn s(key: &str, v: impl Into<String>) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.into()))
}

fn i(key: &str, v: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(v))
}

fn status(code: Option<u16>, error: Option<&str>) -> Option<Status> {
    // Semantic conventions: a server span is an error on 5xx, a client span on 4xx too.
    match (code, error) {
        (_, Some(e)) => Some(Status {
            message: e.into(),
            code: StatusCode::Error as i32,
        }),
        _ => None,
    }
}

/// The spans of the given requests, as one export request body.
pub fn encode(service: &str, batch: &[Finished]) -> Bytes {
    let mut spans = Vec::new();
    for f in batch {
        let mut attrs = vec![
            s("http.request.method", f.method),
            i("http.response.status_code", i64::from(f.status)),
            s("url.path", f.path.clone()),
            s("tollgate.request_id", f.request_id.clone()),
        ];
        if let Some(h) = &f.host {
            attrs.push(s("server.address", h.to_string()));
        }
        if let Some(p) = &f.policy {
            attrs.push(s("tollgate.policy", p.to_string()));
        }
        if let Some(e) = f.error {
            attrs.push(s("error.type", e));
        }
        let failed = f.error.or((f.status >= 500).then_some("server error"));
        spans.push(Span {
            trace_id: f.trace_id.to_vec(),
            span_id: f.span_id.to_vec(),
            parent_span_id: f.parent.map(|p| p.to_vec()).unwrap_or_default(),
            name: f.method.to_owned(),
            kind: SpanKind::Server as i32,
            start_time_unix_nano: f.start_ns,
            end_time_unix_nano: f.end_ns,
            attributes: attrs,
            events: f
                .events
                .iter()
                .map(|a| Event {
                    time_unix_nano: a.at_unix_ns,
                    name: format!("{}.{}", a.remedy, a.action),
                    attributes: vec![
                        s("tollgate.remedy", a.remedy),
                        s("tollgate.action", a.action),
                    ],
                    ..Default::default()
                })
                .collect(),
            status: status(Some(f.status), failed),
            ..Default::default()
        });
        for (n, a) in f.attempts.iter().enumerate() {
            let (start, end, id, code, err) =
                (&a.start_ns, &a.end_ns, &a.span_id, &a.status, &a.error);
            let mut attrs = vec![
                s("http.request.method", f.method),
                i("http.request.resend_count", n as i64),
            ];
            if let Some(c) = code {
                attrs.push(i("http.response.status_code", i64::from(*c)));
            }
            if let Some(h) = &f.host {
                attrs.push(s("server.address", h.to_string()));
            }
            let failed = err
                .as_deref()
                .or(code.filter(|c| *c >= 400).map(|_| "provider error"));
            spans.push(Span {
                trace_id: f.trace_id.to_vec(),
                span_id: id.to_vec(),
                parent_span_id: f.span_id.to_vec(),
                name: f.method.to_owned(),
                kind: SpanKind::Client as i32,
                start_time_unix_nano: *start,
                end_time_unix_nano: (*end).max(*start),
                attributes: attrs,
                status: status(*code, failed),
                ..Default::default()
            });
        }
    }
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![s("service.name", service)],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "tollgate".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    Bytes::from(req.encode_to_vec())
}
