//! Transformations: request and response headers set, added and removed; the upstream
//! path rewritten from the policy's path template; JSON request body fields set or
//! deleted (the body buffered only for policies that do this, up to a cap).

use crate::body::Body;
use crate::error::ProxyError;
use crate::fields::Errors;
use crate::policy::chain::{Built, Exchange, Flow, Phase, Remedy};
use crate::policy::compile::Build;
use crate::policy::kind::{Check, Phases, RemedyKind};
use crate::policy::matcher::PathTemplate;
use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderName, HeaderValue, Response, Uri, header};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Header edits, in this order: remove, set, add.
#[derive(Debug, Clone, Default)]
pub struct HeaderEdits {
    pub remove: Vec<HeaderName>,
    pub set: Vec<(HeaderName, HeaderValue)>,
    pub add: Vec<(HeaderName, HeaderValue)>,
}

impl HeaderEdits {
    pub fn apply(&self, h: &mut HeaderMap) {
        if !self.remove.is_empty() {
            crate::headers::remove_in_order(h, |n| self.remove.contains(n));
        }
        for (n, v) in &self.set {
            h.insert(n.clone(), v.clone());
        }
        for (n, v) in &self.add {
            h.append(n.clone(), v.clone());
        }
    }
}

/// One piece of a path rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathPiece {
    Text(String),
    /// The value of `{name}` in the match template (its segment index).
    Param(usize),
    /// What the template's trailing `*` matched.
    Rest,
}

#[derive(Debug, Clone)]
pub struct JsonEdits {
    pub set: Vec<(String, serde_json::Value)>,
    pub remove: Vec<String>,
    pub max_body: usize,
}

#[derive(Debug, Clone)]
pub struct RequestTransform {
    pub headers: HeaderEdits,
    /// The rewrite and the template whose segments it draws on.
    pub path: Option<(Vec<PathPiece>, Option<PathTemplate>)>,
    pub json: Option<JsonEdits>,
}

/// `request:` in a policy.
pub struct RequestKind;

impl RemedyKind for RequestKind {
    const NAME: &'static str = "request_transform";
    const PHASES: Phases = Phases {
        request: "headers, path, JSON fields (the body is read into memory only for JSON edits, capped)",
        attempt: "",
        response: "",
    };
    const EXAMPLE: &'static str =
        "{set_headers: {x-github-api-version: \"2022-11-28\"}, path: \"/users/{user}/{*}\"}";
    type Raw = RawRequestTransform;
    type Spec = RequestTransform;
    type Action = crate::policy::kind::NoActions;
    type Metrics = ();

    fn validate(r: &RawRequestTransform, cx: &mut Check<'_>) -> Option<RequestTransform> {
        let e = &mut *cx.errors;
        let at = |f: &str| format!("{}.{f}", cx.path);
        let json = (!r.json_set.is_empty() || !r.json_remove.is_empty()).then(|| {
            let ptr = |e: &mut Errors, path: &str, s: &str| {
                if !s.starts_with('/') {
                    e.fail(
                        path,
                        format!("`{s}` is not a JSON pointer; write e.g. `/model` or `/options/temperature`"),
                    );
                }
            };
            for k in r.json_set.keys() {
                ptr(e, &at(&format!("json_set.{k}")), k);
            }
            for (j, k) in r.json_remove.iter().enumerate() {
                ptr(e, &at(&format!("json_remove[{j}]")), k);
            }
            JsonEdits {
                set: r.json_set.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                remove: r.json_remove.clone(),
                max_body: r.max_body.get(),
            }
        });
        let template = cx.template;
        Some(RequestTransform {
            headers: edits(
                e,
                &cx.path,
                &r.set_headers,
                &r.add_headers,
                &r.remove_headers,
            ),
            path: r
                .path
                .as_deref()
                .map(|s| (rewrite(e, &at("path"), s, template), template.cloned())),
            json,
        })
    }

    fn build(spec: &RequestTransform, _: &mut Build<'_>) -> Built {
        Built::from(Arc::new(spec.clone()))
    }
}

impl Remedy for RequestTransform {
    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        self.headers.apply(&mut x.parts.headers);
        if let Some((pieces, template)) = &self.path
            && let Err(e) = rewrite_path(&mut x.parts.uri, pieces, template.as_ref())
        {
            return Phase::Now(Err(e));
        }
        // Only a JSON edit reads the body, and waits for it.
        match &self.json {
            None => Phase::next(),
            Some(json) => Phase::wait(async move {
                edit_json(x, json).await?;
                Ok(Flow::Continue)
            }),
        }
    }
}

fn rewrite_path(
    uri: &mut Uri,
    pieces: &[PathPiece],
    template: Option<&PathTemplate>,
) -> Result<(), ProxyError> {
    let path = uri.path();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let fixed = template.map_or(0, |t| t.len());
    let mut out = String::with_capacity(path.len() + 16);
    for p in pieces {
        match p {
            PathPiece::Text(t) => out.push_str(t),
            PathPiece::Param(i) => out.push_str(segments.get(*i).copied().unwrap_or("")),
            PathPiece::Rest => out.push_str(&segments.get(fixed..).unwrap_or(&[]).join("/")),
        }
    }
    if !out.starts_with('/') {
        out.insert(0, '/');
    }
    if let Some(q) = uri.query() {
        out.push('?');
        out.push_str(q);
    }
    let pq = PathAndQuery::try_from(out)
        .map_err(|e| ProxyError::BadTarget(format!("rewritten path: {e}")))?;
    let mut parts = std::mem::take(uri).into_parts();
    parts.path_and_query = Some(pq);
    *uri = Uri::from_parts(parts).map_err(|e| ProxyError::BadTarget(e.to_string()))?;
    Ok(())
}

async fn edit_json(x: &mut Exchange, json: &JsonEdits) -> Result<(), ProxyError> {
    let is_json = x
        .parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    if !is_json {
        return Ok(());
    }
    let Some(body) = x.buffer(json.max_body).await? else {
        return Err(ProxyError::BodyTooLarge {
            limit: json.max_body,
            what: "policies[].request.max_body (a JSON body is read whole to edit it)",
        });
    };
    if body.is_empty() {
        return Ok(());
    }
    let mut value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ProxyError::BadRequest(format!("the request body is not valid JSON: {e}")))?;
    for pointer in &json.remove {
        remove_at(&mut value, pointer);
    }
    for (pointer, v) in &json.set {
        set_at(&mut value, pointer, v.clone());
    }
    let edited = Bytes::from(serde_json::to_vec(&value).expect("a JSON value serialises"));
    x.parts
        .headers
        .insert(header::CONTENT_LENGTH, edited.len().into());
    crate::headers::remove_in_order(&mut x.parts.headers, |n| n == header::TRANSFER_ENCODING);
    x.buffered = Some(edited);
    Ok(())
}

/// RFC 6901 reference tokens of a pointer.
fn tokens(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Sets the value at `pointer`, creating objects on the way.
pub fn set_at(root: &mut serde_json::Value, pointer: &str, v: serde_json::Value) {
    let toks = tokens(pointer);
    let Some((last, path)) = toks.split_last() else {
        *root = v;
        return;
    };
    let mut cur = root;
    for t in path {
        if !cur.is_object() && !cur.is_array() {
            *cur = serde_json::Value::Object(Default::default());
        }
        cur = match cur {
            serde_json::Value::Array(a) => match t.parse::<usize>().ok().and_then(|i| a.get_mut(i))
            {
                Some(c) => c,
                None => return,
            },
            serde_json::Value::Object(o) => o
                .entry(t.clone())
                .or_insert_with(|| serde_json::Value::Object(Default::default())),
            _ => return,
        };
    }
    match cur {
        serde_json::Value::Object(o) => {
            o.insert(last.clone(), v);
        }
        serde_json::Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => a[i] = v,
            _ if last == "-" => a.push(v),
            _ => {}
        },
        other => {
            let mut o = serde_json::Map::new();
            o.insert(last.clone(), v);
            *other = serde_json::Value::Object(o);
        }
    }
}

pub fn remove_at(root: &mut serde_json::Value, pointer: &str) {
    let toks = tokens(pointer);
    let Some((last, path)) = toks.split_last() else {
        return;
    };
    let parent: String = path
        .iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect();
    match root.pointer_mut(&parent) {
        Some(serde_json::Value::Object(o)) => {
            o.remove(last);
        }
        Some(serde_json::Value::Array(a)) => {
            if let Ok(i) = last.parse::<usize>()
                && i < a.len()
            {
                a.remove(i);
            }
        }
        _ => {}
    }
}

/// Response header edits.
#[derive(Debug, Clone)]
pub struct ResponseTransform {
    pub headers: HeaderEdits,
}

/// `response:` in a policy.
pub struct ResponseKind;

impl RemedyKind for ResponseKind {
    const NAME: &'static str = "response_transform";
    const PHASES: Phases = Phases {
        request: "",
        attempt: "",
        response: "headers",
    };
    const EXAMPLE: &'static str = "{remove_headers: [x-powered-by]}";
    type Raw = RawHeaderTransform;
    type Spec = ResponseTransform;
    type Action = crate::policy::kind::NoActions;
    type Metrics = ();

    fn validate(r: &RawHeaderTransform, cx: &mut Check<'_>) -> Option<ResponseTransform> {
        Some(ResponseTransform {
            headers: edits(
                cx.errors,
                &cx.path,
                &r.set_headers,
                &r.add_headers,
                &r.remove_headers,
            ),
        })
    }

    fn build(spec: &ResponseTransform, _: &mut Build<'_>) -> Built {
        Built::from(Arc::new(spec.clone()))
    }
}

impl Remedy for ResponseTransform {
    fn request<'a>(&'a self, _x: &'a mut Exchange) -> Phase<'a> {
        Phase::next()
    }

    fn response(&self, _x: &mut Exchange, mut resp: Response<Body>) -> Response<Body> {
        self.headers.apply(resp.headers_mut());
        resp
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawHeaderTransform {
    /// Headers set (replacing any value), after `remove_headers` and before `add_headers`. `${ENV_VAR}` is substituted.
    #[serde(serialize_with = "masked")]
    pub set_headers: BTreeMap<String, String>,
    /// Headers added beside existing values.
    #[serde(serialize_with = "masked")]
    pub add_headers: BTreeMap<String, String>,
    /// Headers removed.
    pub remove_headers: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawRequestTransform {
    /// Headers set (replacing any value), after `remove_headers` and before `add_headers`. `${ENV_VAR}` is substituted.
    #[serde(serialize_with = "masked")]
    pub set_headers: BTreeMap<String, String>,
    /// Headers added beside existing values.
    #[serde(serialize_with = "masked")]
    pub add_headers: BTreeMap<String, String>,
    /// Headers removed.
    pub remove_headers: Vec<String>,
    /// New upstream path: literal text with `{param}` from `match.path` and `{*}` for what its trailing `*` matched (`/v2/repos/{owner}/{repo}/{*}`); every reference must exist in `match.path`. The query string is kept. Absent: unchanged.
    pub path: Option<String>,
    /// JSON request body fields to set: JSON pointer (`/model`, `/options/temperature`) to value. Missing parent objects are created; `/list/-` appends. Only a body whose `content-type` contains `json` is edited; others pass untouched. A body labelled JSON that does not parse is refused with **400 `bad_request`** (the message says where it fails) and nothing is sent: tollgate cannot edit what it cannot read, and sending it unedited would skip the edit the policy promises.
    pub json_set: BTreeMap<String, serde_json::Value>,
    /// JSON request body fields to delete, as JSON pointers (as `json_set` for which bodies).
    pub json_remove: Vec<String>,
    /// Only policies with JSON edits read the body, whole, up to this: above it the client gets **413 `body_too_large`** and nothing is sent.
    pub max_body: crate::fields::units::Size<1, { 64 << 20 }>,
}

impl Default for RawRequestTransform {
    fn default() -> Self {
        Self {
            set_headers: BTreeMap::new(),
            add_headers: BTreeMap::new(),
            remove_headers: Vec::new(),
            path: None,
            json_set: BTreeMap::new(),
            json_remove: Vec::new(),
            max_body: crate::fields::units::Size::bytes(1 << 20),
        }
    }
}

pub fn edits(
    e: &mut Errors,
    path: &str,
    set: &BTreeMap<String, String>,
    add: &BTreeMap<String, String>,
    remove: &[String],
) -> HeaderEdits {
    HeaderEdits {
        remove: remove
            .iter()
            .enumerate()
            .filter_map(|(i, h)| e.header_name(&format!("{path}.remove_headers[{i}]"), h))
            .collect(),
        set: e.headers(&format!("{path}.set_headers"), set),
        add: e.headers(&format!("{path}.add_headers"), add),
    }
}

/// `/v2/{owner}/{*}` against the match template.
pub fn rewrite(
    e: &mut Errors,
    path: &str,
    s: &str,
    template: Option<&PathTemplate>,
) -> Vec<PathPiece> {
    let mut pieces = Vec::new();
    let mut rest = s;
    if !s.starts_with('/') {
        e.fail(path, format!("`{s}` must start with `/`"));
    }
    while let Some(open) = rest.find('{') {
        if open > 0 {
            pieces.push(PathPiece::Text(rest[..open].to_owned()));
        }
        let Some(close) = rest[open..].find('}') else {
            e.fail(path, format!("`{s}`: a `{{` is never closed"));
            return pieces;
        };
        let name = &rest[open + 1..open + close];
        if name == "*" {
            if !template.is_some_and(PathTemplate::has_rest) {
                e.fail(
                    path,
                    format!("`{s}` uses `{{*}}`, but `match.path` has no trailing `*`"),
                );
            }
            pieces.push(PathPiece::Rest);
        } else {
            match template.and_then(|t| t.param(name)) {
                Some(i) => pieces.push(PathPiece::Param(i)),
                None => e.fail(
                    path,
                    format!("`{s}` uses `{{{name}}}`, which `match.path` does not define"),
                ),
            }
        }
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(PathPiece::Text(rest.to_owned()));
    }
    pieces
}

/// Header values as `/config` shows them: `MASKED` when the header's name says it carries
/// a secret (`authorization`, `x-api-key`, a cookie…) and the value is not a `${VAR}`.
fn masked<S: serde::Serializer>(map: &BTreeMap<String, String>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(map.len()))?;
    for (name, value) in map {
        let n = name.to_ascii_lowercase();
        let secret = [
            "auth", "cookie", "token", "secret", "key", "password", "session",
        ]
        .iter()
        .any(|w| n.contains(w));
        if secret {
            m.serialize_entry(name, crate::fields::SecretText(value.clone()).shown())?;
        } else {
            m.serialize_entry(name, value)?;
        }
    }
    m.end()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_pointers() {
        let mut v = json!({"a": {"b": 1}, "list": [1, 2, 3]});
        set_at(&mut v, "/a/c", json!(2));
        set_at(&mut v, "/new/deep", json!("x"));
        remove_at(&mut v, "/a/b");
        remove_at(&mut v, "/list/0");
        set_at(&mut v, "/list/-", json!(4));
        assert_eq!(
            v,
            json!({"a": {"c": 2}, "new": {"deep": "x"}, "list": [2, 3, 4]})
        );
    }

    #[test]
    fn path_rewrite() {
        let t = PathTemplate::new("/repos/{owner}/{repo}/*").unwrap();
        let pieces = vec![
            PathPiece::Text("/v2/".into()),
            PathPiece::Param(2),
            PathPiece::Text("/".into()),
            PathPiece::Param(1),
            PathPiece::Text("/".into()),
            PathPiece::Rest,
        ];
        let mut uri: Uri = "/repos/me/app/issues/4?state=open".parse().unwrap();
        rewrite_path(&mut uri, &pieces, Some(&t)).unwrap();
        assert_eq!(uri, "/v2/app/me/issues/4?state=open");
    }
}
