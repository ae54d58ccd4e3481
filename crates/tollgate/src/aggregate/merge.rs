//! What happens to each backend's JSON answer before merging, in this order: an array is
//! wrapped under the backend's `collection` key; `target` takes a sub-object; `allow`
//! keeps and then `deny` drops fields (dotted paths into nested objects; KrakenD uses
//! `allow` alone when both are set, here both apply); `mapping` renames top-level fields;
//! `group` nests the result under a key. The results are merged into one object in
//! declaration order: on a key two backends both produce, the later backend's value wins
//! (KrakenD's winner depends on which answer arrives first).

use serde_json::{Map, Value};

/// How one backend's answer is shaped (validated config).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shape {
    pub collection: String,
    pub target: Option<Vec<String>>,
    pub allow: Vec<Vec<String>>,
    pub deny: Vec<Vec<String>>,
    pub mapping: Vec<(String, String)>,
    pub group: Option<String>,
}

impl Shape {
    /// The shaped object; `Err` when the answer is neither an object nor an array.
    pub fn apply(&self, answer: Value) -> Result<Map<String, Value>, &'static str> {
        let mut obj = match answer {
            Value::Object(m) => m,
            Value::Array(a) => Map::from_iter([(self.collection.clone(), Value::Array(a))]),
            _ => return Err("the answer is not a JSON object or array"),
        };
        if let Some(path) = &self.target {
            obj = match take(&mut obj, path) {
                Some(Value::Object(m)) => m,
                Some(Value::Array(a)) => {
                    Map::from_iter([(self.collection.clone(), Value::Array(a))])
                }
                // A missing or scalar target leaves nothing to merge.
                _ => Map::new(),
            };
        }
        if !self.allow.is_empty() {
            let mut kept = Map::new();
            for path in &self.allow {
                if let Some(v) = take(&mut obj, path) {
                    put(&mut kept, path, v);
                }
            }
            obj = kept;
        }
        for path in &self.deny {
            take(&mut obj, path);
        }
        for (from, to) in &self.mapping {
            if let Some(v) = obj.remove(from) {
                obj.insert(to.clone(), v);
            }
        }
        Ok(match &self.group {
            Some(g) => Map::from_iter([(g.clone(), Value::Object(obj))]),
            None => obj,
        })
    }
}

/// Removes and returns the value at a dotted path.
fn take(obj: &mut Map<String, Value>, path: &[String]) -> Option<Value> {
    let (last, parents) = path.split_last()?;
    let mut cur = obj;
    for k in parents {
        cur = cur.get_mut(k)?.as_object_mut()?;
    }
    cur.remove(last)
}

/// Puts a value at a dotted path, making the objects on the way.
fn put(obj: &mut Map<String, Value>, path: &[String], v: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for k in parents {
        let next = cur
            .entry(k.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if !next.is_object() {
            *next = Value::Object(Map::new());
        }
        cur = next.as_object_mut().expect("made an object above");
    }
    cur.insert(last.clone(), v);
}

/// Merges `part` into `into`: top-level keys of `part` replace the same keys of `into`.
pub fn merge(into: &mut Map<String, Value>, part: Map<String, Value>) {
    into.extend(part);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(s: &str) -> Vec<String> {
        s.split('.').map(str::to_owned).collect()
    }

    fn shape() -> Shape {
        Shape {
            collection: "collection".into(),
            ..Shape::default()
        }
    }

    #[test]
    fn target_allow_deny_mapping_group_in_order() {
        let s = Shape {
            target: Some(path("data")),
            allow: vec![path("user.name"), path("user.email"), path("plan")],
            deny: vec![path("user.email")],
            mapping: vec![("plan".into(), "tier".into())],
            group: Some("account".into()),
            ..shape()
        };
        let answer = json!({"data": {"user": {"name": "ada", "email": "a@x", "id": 1}, "plan": "pro", "x": 1}, "meta": 2});
        assert_eq!(
            Value::Object(s.apply(answer).unwrap()),
            json!({"account": {"user": {"name": "ada"}, "tier": "pro"}})
        );
    }

    #[test]
    fn arrays_are_wrapped_and_scalars_refused() {
        let s = Shape {
            collection: "items".into(),
            ..shape()
        };
        assert_eq!(
            Value::Object(s.apply(json!([1, 2])).unwrap()),
            json!({"items": [1, 2]})
        );
        assert!(s.apply(json!("text")).is_err());
        let missing = Shape {
            target: Some(path("nope")),
            ..shape()
        };
        assert!(missing.apply(json!({"a": 1})).unwrap().is_empty());
    }

    #[test]
    fn later_backends_win_on_conflicting_keys() {
        let mut all = Map::new();
        merge(&mut all, shape().apply(json!({"a": 1, "b": 1})).unwrap());
        merge(&mut all, shape().apply(json!({"b": 2, "c": 2})).unwrap());
        assert_eq!(Value::Object(all), json!({"a": 1, "b": 2, "c": 2}));
    }
}
