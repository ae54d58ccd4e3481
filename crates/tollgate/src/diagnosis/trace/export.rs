//! Finished spans exported through opentelemetry-otlp: OTLP/HTTP (protobuf, sent by the
//! gateway's own HTTP client with the upstream TLS settings) or OTLP/gRPC (tonic), the
//! standard `OTEL_EXPORTER_OTLP_*` variables where the config leaves a setting out, and
//! the resource from `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`. Spans carry the
//! HTTP semantic-convention attributes
//! (https://opentelemetry.io/docs/specs/semconv/http/http-spans/).

use super::Finished;
use crate::body::{Body, full};
use crate::diagnosis::har::collector::Sender;
use crate::diagnosis::settings::{OtlpProtocol, TraceExport};
use crate::upstream::Connector;
use bytes::Bytes;
use hyper_util::client::legacy::Client;
use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// The spans' exporter, as a sink of finished calls.
pub struct Exporter {
    inner: opentelemetry_otlp::SpanExporter,
    scope: InstrumentationScope,
    timeout: Duration,
}

/// The protocol the config names, else the OTEL_ variables', else `http/protobuf`.
fn protocol(t: &TraceExport) -> Result<OtlpProtocol, String> {
    if let Some(p) = t.protocol {
        return Ok(p);
    }
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Ok(v) = std::env::var(var) {
            return match v.trim() {
                "grpc" => Ok(OtlpProtocol::Grpc),
                "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
                other => Err(format!(
                    "{var}=`{other}`: tollgate exports spans over `grpc` or `http/protobuf`; set one of them (or diagnosis.traces.protocol)"
                )),
            };
        }
    }
    Ok(OtlpProtocol::HttpProtobuf)
}

/// What `tollgate check` can know before exporting: the protocol the config and the
/// OTEL_ variables ask for is one tollgate speaks.
pub fn check(t: &TraceExport) -> Result<(), String> {
    protocol(t).map(|_| ())
}

/// The endpoint gRPC will reach, to know whether it needs TLS.
fn grpc_endpoint(t: &TraceExport) -> String {
    t.endpoint
        .clone()
        .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").ok())
        .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
        .unwrap_or_default()
}

/// The resource: the OTEL_ variables' attributes, with `service.name` the config's, else
/// the variables', else `tollgate`.
fn resource(t: &TraceExport) -> Resource {
    let from_env = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
            v.split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
    let builder = Resource::builder();
    match (&t.service_name, from_env) {
        (Some(name), _) => builder.with_service_name(name.clone()),
        (None, false) => builder.with_service_name("tollgate"),
        (None, true) => builder,
    }
    .build()
}

impl Exporter {
    /// The exporter `t` describes; `connector` carries OTLP/HTTP (TLS as upstreams),
    /// `extra_ca` is added to gRPC's roots.
    pub fn new(
        t: &TraceExport,
        connector: Connector,
        extra_ca: Option<&std::path::Path>,
    ) -> Result<Self, String> {
        let built = match protocol(t)? {
            OtlpProtocol::HttpProtobuf => {
                let headers: HashMap<String, String> = t
                    .headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_owned()))
                    .collect();
                let mut b = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_http_client(OtlpHttp::new(connector))
                    .with_timeout(t.timeout)
                    .with_headers(headers);
                if let Some(e) = &t.endpoint {
                    b = b.with_endpoint(e.clone());
                }
                b.build()
            }
            OtlpProtocol::Grpc => {
                let mut metadata = tonic::metadata::MetadataMap::new();
                for (k, v) in &t.headers {
                    if let (Ok(k), Ok(v)) = (
                        tonic::metadata::MetadataKey::from_bytes(k.as_str().as_bytes()),
                        tonic::metadata::MetadataValue::try_from(v.as_bytes()),
                    ) {
                        metadata.insert(k, v);
                    }
                }
                let mut b = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_timeout(t.timeout)
                    .with_metadata(metadata);
                if grpc_endpoint(t).starts_with("https://") {
                    let mut tls = tonic::transport::ClientTlsConfig::new().with_webpki_roots();
                    if let Some(path) = extra_ca {
                        let pem =
                            std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
                        tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
                    }
                    b = b.with_tls_config(tls);
                }
                if let Some(e) = &t.endpoint {
                    b = b.with_endpoint(e.clone());
                }
                b.build()
            }
        };
        let mut inner = built.map_err(|e| format!("OTLP exporter: {e}"))?;
        inner.set_resource(&resource(t));
        Ok(Self {
            inner,
            scope: InstrumentationScope::builder("tollgate")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            timeout: t.timeout,
        })
    }

    /// The spans of `batch`: per call, the server span and a client span per attempt.
    fn spans(&self, batch: &[Finished]) -> Vec<SpanData> {
        let mut out = Vec::new();
        for f in batch {
            let trace_id = TraceId::from_bytes(f.trace_id);
            let context = |span: [u8; 8]| {
                SpanContext::new(
                    trace_id,
                    SpanId::from_bytes(span),
                    TraceFlags::SAMPLED,
                    false,
                    TraceState::default(),
                )
            };
            let mut attributes = vec![
                KeyValue::new("http.request.method", f.method),
                KeyValue::new("http.response.status_code", i64::from(f.status)),
                KeyValue::new("url.path", f.path.clone()),
                KeyValue::new("tollgate.request_id", f.request_id.clone()),
            ];
            if let Some(h) = &f.host {
                attributes.push(KeyValue::new("server.address", h.to_string()));
            }
            if let Some(p) = &f.policy {
                attributes.push(KeyValue::new("tollgate.policy", p.to_string()));
            }
            if let Some(e) = f.error {
                attributes.push(KeyValue::new("error.type", e));
            }
            if let Some(m) = &f.mcp {
                mcp_attributes(m, &mut attributes);
            }
            // Semantic conventions: a server span is an error on 5xx, a client span on
            // 4xx too.
            let failed = f.error.or((f.status >= 500).then_some("server error"));
            out.push(SpanData {
                span_context: context(f.span_id),
                parent_span_id: f.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
                parent_span_is_remote: f.parent.is_some(),
                span_kind: SpanKind::Server,
                name: match &f.mcp {
                    Some(m) => Cow::Owned(mcp_span_name(m)),
                    None => Cow::Borrowed(f.method),
                },
                start_time: at(f.start_ns),
                end_time: at(f.end_ns.max(f.start_ns)),
                attributes,
                dropped_attributes_count: 0,
                events: events(
                    f.events
                        .iter()
                        .map(|a| {
                            Event::new(
                                format!("{}.{}", a.remedy, a.action),
                                at(a.at_unix_ns),
                                vec![
                                    KeyValue::new("tollgate.remedy", a.remedy),
                                    KeyValue::new("tollgate.action", a.action),
                                ],
                                0,
                            )
                        })
                        .collect(),
                ),
                links: SpanLinks::default(),
                status: failed.map_or(Status::Unset, |e| Status::error(e.to_owned())),
                instrumentation_scope: self.scope.clone(),
            });
            for (n, a) in f.attempts.iter().enumerate() {
                let mut attributes = vec![
                    KeyValue::new("http.request.method", f.method),
                    KeyValue::new("http.request.resend_count", n as i64),
                ];
                if let Some(c) = a.status {
                    attributes.push(KeyValue::new("http.response.status_code", i64::from(c)));
                }
                if let Some(h) = &f.host {
                    attributes.push(KeyValue::new("server.address", h.to_string()));
                }
                let failed = a.error.clone().or(a
                    .status
                    .filter(|c| *c >= 400)
                    .map(|_| "provider error".into()));
                out.push(SpanData {
                    span_context: context(a.span_id),
                    parent_span_id: SpanId::from_bytes(f.span_id),
                    parent_span_is_remote: false,
                    span_kind: SpanKind::Client,
                    name: Cow::Borrowed(f.method),
                    start_time: at(a.start_ns),
                    end_time: at(a.end_ns.max(a.start_ns)),
                    attributes,
                    dropped_attributes_count: 0,
                    events: SpanEvents::default(),
                    links: SpanLinks::default(),
                    status: failed.map_or(Status::Unset, Status::error),
                    instrumentation_scope: self.scope.clone(),
                });
            }
        }
        out
    }
}

/// `SpanEvents` holding `list` (its struct is non-exhaustive; its fields are public).
fn events(list: Vec<Event>) -> SpanEvents {
    let mut e = SpanEvents::default();
    e.events = list;
    e
}

fn at(unix_ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(unix_ns)
}

impl Sender<Finished> for Exporter {
    async fn send(&self, batch: &[Finished]) -> Result<u64, String> {
        let spans = self.spans(batch);
        let n = spans.len() as u64;
        tokio::time::timeout(self.timeout, self.inner.export(spans))
            .await
            .map_err(|_| format!("no answer within {:?}", self.timeout))?
            .map_err(|e| e.to_string())?;
        Ok(n)
    }
}

/// OTLP/HTTP's client: the gateway's own connector (its TLS settings, its DNS), so the
/// exporter needs no HTTP stack of its own.
#[derive(Debug, Clone)]
struct OtlpHttp {
    client: Client<Connector, Body>,
}

impl OtlpHttp {
    fn new(connector: Connector) -> Self {
        Self {
            client: crate::diagnosis::har::collector::client(connector),
        }
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OtlpHttp {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let resp = self
            .client
            .request(http::Request::from_parts(parts, full(body)))
            .await?;
        let (parts, body) = resp.into_parts();
        let body = crate::diagnosis::har::collector::read_answer(body).await;
        Ok(http::Response::from_parts(parts, body))
    }
}

/// An MCP call's span name (OpenTelemetry's MCP conventions: `{mcp.method.name} {target}`,
/// the target the tool, prompt or resource it names).
fn mcp_span_name(m: &crate::mcp::Call) -> String {
    match &m.name {
        Some(n) => format!("{} {n}", m.method),
        None => m.method.to_string(),
    }
}

/// An MCP call's attributes (OpenTelemetry's MCP and GenAI conventions).
fn mcp_attributes(m: &crate::mcp::Call, attributes: &mut Vec<KeyValue>) {
    attributes.push(KeyValue::new("mcp.method.name", m.method.to_string()));
    if let Some(id) = &m.id {
        attributes.push(KeyValue::new(
            "jsonrpc.request.id",
            id.trim_matches('"').to_owned(),
        ));
    }
    let Some(n) = &m.name else { return };
    let key = match &*m.method {
        "tools/call" => "gen_ai.tool.name",
        "prompts/get" => "gen_ai.prompt.name",
        _ => "mcp.resource.uri",
    };
    attributes.push(KeyValue::new(key, n.to_string()));
}
