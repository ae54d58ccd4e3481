//! Templates of aggregated endpoints: the endpoint's path (`/users/{user}`, matched
//! segment by segment) and each backend's URL (`/users/{user}/repos?sort={sort}`, with
//! `{respN.a.b}` naming a field of an earlier backend's answer).

use serde_json::Value;

/// One piece of an endpoint path.
#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Literal(String),
    Param(String),
}

/// An endpoint path: literal segments and `{name}` segments (each one whole segment).
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointPath {
    segments: Vec<Segment>,
    pub text: String,
}

impl EndpointPath {
    /// Parses `/a/{b}/c`: every segment either literal or exactly `{name}`.
    pub fn parse(text: &str) -> Result<Self, String> {
        if !text.starts_with('/') {
            return Err(format!("`{text}` must start with `/`"));
        }
        let mut segments = Vec::new();
        for s in text[1..].split('/') {
            if let Some(name) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
                if !is_name(name) {
                    return Err(format!(
                        "`{{{name}}}` in `{text}`: a parameter name is letters, digits, `_` and `-`"
                    ));
                }
                if segments.contains(&Segment::Param(name.to_owned())) {
                    return Err(format!("`{{{name}}}` appears twice in `{text}`"));
                }
                segments.push(Segment::Param(name.to_owned()));
            } else if s.contains('{') || s.contains('}') {
                return Err(format!(
                    "segment `{s}` of `{text}`: a parameter is a whole segment, `{{name}}`"
                ));
            } else {
                segments.push(Segment::Literal(s.to_owned()));
            }
        }
        Ok(Self {
            segments,
            text: text.to_owned(),
        })
    }

    /// The parameter names, in order.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Param(p) => Some(p.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// Whether this template is the more specific where both match: at the first segment
    /// where one is literal and the other a parameter, the literal wins (KrakenD's
    /// router, and httprouter's, decide so), whatever the declaration order.
    pub fn beats(&self, other: &EndpointPath) -> bool {
        for (a, b) in self.segments.iter().zip(&other.segments) {
            match (a, b) {
                (Segment::Literal(_), Segment::Param(_)) => return true,
                (Segment::Param(_), Segment::Literal(_)) => return false,
                _ => {}
            }
        }
        false
    }

    /// The parameters' values when `path` matches (values as sent: still percent-encoded).
    pub fn matches<'a>(&self, path: &'a str) -> Option<Vec<&'a str>> {
        let mut parts = path.strip_prefix('/')?.split('/');
        let mut values = Vec::new();
        for s in &self.segments {
            let p = parts.next()?;
            match s {
                Segment::Literal(l) if l == p => {}
                Segment::Literal(_) => return None,
                Segment::Param(_) if p.is_empty() => return None,
                Segment::Param(_) => values.push(p),
            }
        }
        parts.next().is_none().then_some(values)
    }
}

/// A parameter name: letters, digits, `_` and `-` (`{user-id}`, as KrakenD allows).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A piece of a backend URL's path and query.
#[derive(Debug, Clone, PartialEq)]
pub enum UrlPiece {
    Literal(String),
    /// The endpoint path's parameter at this index.
    Param(usize),
    /// A field of backend `n`'s answer (dotted path), percent-encoded when inserted.
    Answer(usize, Vec<String>),
}

/// The path and query of a backend URL, with its pieces.
#[derive(Debug, Clone, PartialEq)]
pub struct UrlTemplate {
    pub pieces: Vec<UrlPiece>,
}

impl UrlTemplate {
    /// Parses the path-and-query part of a backend URL; `params` are the endpoint path's
    /// parameter names, `index` this backend's place (an answer it names must be earlier).
    pub fn parse(text: &str, params: &[&str], index: usize) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                pieces.push(UrlPiece::Literal(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("`{text}`: a `{{` without its `}}`"))?
                + open;
            let name = &rest[open + 1..close];
            pieces.push(Self::piece(name, params, index)?);
            rest = &rest[close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("`{text}`: a `}}` without its `{{`"));
        }
        if !rest.is_empty() {
            pieces.push(UrlPiece::Literal(rest.to_owned()));
        }
        Ok(Self { pieces })
    }

    fn piece(name: &str, params: &[&str], index: usize) -> Result<UrlPiece, String> {
        if let Some(field) = name.strip_prefix("resp") {
            // `{resp0.a.b}`, or KrakenD's `{resp0_a.b}`.
            let (n, path) = field.split_once(['.', '_']).unwrap_or((field, ""));
            if let Ok(n) = n.parse::<usize>() {
                if n >= index {
                    return Err(format!(
                        "`{{{name}}}`: a backend can use the answer of an earlier backend only (this is backend {index})"
                    ));
                }
                if path.is_empty() {
                    return Err(format!(
                        "`{{{name}}}`: name a field of the answer, e.g. `{{resp{n}.id}}`"
                    ));
                }
                return Ok(UrlPiece::Answer(
                    n,
                    path.split('.').map(str::to_owned).collect(),
                ));
            }
        }
        match params.iter().position(|p| *p == name) {
            Some(i) => Ok(UrlPiece::Param(i)),
            None => Err(format!(
                "`{{{name}}}` is not a parameter of the endpoint path (it has {}) nor `{{respN.field}}`",
                if params.is_empty() {
                    "none".to_owned()
                } else {
                    params
                        .iter()
                        .map(|p| format!("`{{{p}}}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )),
        }
    }

    /// The earlier backends whose answers this URL uses.
    pub fn needs(&self) -> impl Iterator<Item = usize> + '_ {
        self.pieces.iter().filter_map(|p| match p {
            UrlPiece::Answer(n, _) => Some(*n),
            _ => None,
        })
    }

    /// The path and query for one call; `None` when a named answer field is missing or
    /// not a string, number or boolean.
    /// The path and query with every piece filled in; `None` when a field it uses is
    /// missing (or is an object).
    pub fn render<S: AsRef<str>>(&self, params: &[S], answers: &[Answer]) -> Option<String> {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                UrlPiece::Literal(l) => out.push_str(l),
                UrlPiece::Param(i) => out.push_str(params.get(*i)?.as_ref()),
                UrlPiece::Answer(n, path) => {
                    let v = answers.get(*n)?.field(path)?;
                    match v {
                        // KrakenD inserts an array's values as `1,2,3`.
                        Value::Array(items) => {
                            for (k, item) in items.iter().enumerate() {
                                if k > 0 {
                                    out.push(',');
                                }
                                encode_into(&mut out, &scalar(item)?);
                            }
                        }
                        v => encode_into(&mut out, &scalar(v)?),
                    }
                }
            }
        }
        Some(out)
    }
}

/// A scalar as text in a URL (a string without its quotes).
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// An earlier backend's answer as a later backend's URL reads it.
#[derive(Debug, Default, Clone)]
pub struct Answer {
    /// After that backend's own `target`/`allow`/`deny`/`mapping`/`group` (what KrakenD's
    /// `{resp0_…}` reads).
    pub shaped: Option<Value>,
    /// As it came, kept only when a later URL uses this backend: a field the shaping
    /// dropped or moved is still found at its original path.
    pub raw: Option<Value>,
}

impl Answer {
    pub fn answered(&self) -> bool {
        self.shaped.is_some()
    }

    /// The field at `path`: in the shaped answer, else in the raw one.
    pub fn field(&self, path: &[String]) -> Option<&Value> {
        let shaped = self.shaped.as_ref().and_then(|v| field(v, path));
        shaped.or_else(|| field(self.raw.as_ref()?, path))
    }
}

/// The value at a dotted path of a JSON object.
pub fn field<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k.as_str()))
}

/// Percent-encodes everything but RFC 3986 unreserved characters (§2.3), so a value from
/// an answer stays one path segment or query value.
fn encode_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_match_segment_by_segment() {
        let t = EndpointPath::parse("/users/{user}/repos/{repo}").unwrap();
        assert_eq!(t.params().collect::<Vec<_>>(), ["user", "repo"]);
        assert_eq!(
            t.matches("/users/ada/repos/x%20y"),
            Some(vec!["ada", "x%20y"])
        );
        assert_eq!(t.matches("/users/ada/repos"), None);
        assert_eq!(t.matches("/users/ada/repos/x/more"), None);
        assert_eq!(
            t.matches("/users//repos/x"),
            None,
            "an empty segment is no value"
        );
        assert!(EndpointPath::parse("/a/x{b}").is_err());
        assert!(EndpointPath::parse("/a/{b}/{b}").is_err());
        assert!(EndpointPath::parse("a").is_err());
    }

    #[test]
    fn urls_take_params_and_earlier_answers() {
        let t = UrlTemplate::parse(
            "/orders/{id}/customer/{resp0.customer.id}?q={resp0.name}",
            &["id"],
            1,
        )
        .unwrap();
        assert_eq!(t.needs().collect::<Vec<_>>(), [0, 0]);
        let raw = |v| Answer {
            shaped: Some(v),
            raw: None,
        };
        let answers = [raw(json!({"customer": {"id": 7}, "name": "a b/c"}))];
        assert_eq!(
            t.render(&["42"], &answers).unwrap(),
            "/orders/42/customer/7?q=a%20b%2Fc"
        );
        assert_eq!(t.render(&["42"], &[raw(json!({}))]), None, "missing field");
        let e = UrlTemplate::parse("/x/{nope}", &["id"], 0).unwrap_err();
        assert!(
            e.contains("`{nope}` is not a parameter") && e.contains("`{id}`"),
            "{e}"
        );
        let e = UrlTemplate::parse("/x/{resp1.id}", &[], 1).unwrap_err();
        assert!(e.contains("earlier backend"), "{e}");
    }

    #[test]
    fn answers_are_read_shaped_first_and_arrays_join_with_commas() {
        // KrakenD's spelling, on a backend grouped under `order`.
        let t = UrlTemplate::parse("/c/{resp0_order.customer_id}?ids={resp0.ids}", &[], 1).unwrap();
        let a = Answer {
            shaped: Some(json!({"order": {"customer_id": "c 1"}})),
            raw: Some(json!({"customer_id": "raw", "ids": [1, "x/y", 3]})),
        };
        assert_eq!(
            t.render::<&str>(&[], std::slice::from_ref(&a)).unwrap(),
            "/c/c%201?ids=1,x%2Fy,3"
        );
        // The raw path still works (what tollgate read before).
        let t = UrlTemplate::parse("/c/{resp0.customer_id}", &[], 1).unwrap();
        assert_eq!(t.render::<&str>(&[], &[a]).unwrap(), "/c/raw");
        let nested = Answer {
            shaped: Some(json!({"ids": [[1]]})),
            raw: None,
        };
        let t = UrlTemplate::parse("/c/{resp0.ids}", &[], 1).unwrap();
        assert_eq!(t.render::<&str>(&[], &[nested]), None);
    }
}
