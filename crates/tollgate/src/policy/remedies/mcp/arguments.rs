//! Argument rules: values a tool may not be called with (`mcp.arguments`) — a refund
//! above an amount, a query matching `DROP *`. Only a call of a tool a rule names has its
//! arguments read (parsed from the body already in memory); a value that breaks a rule
//! refuses the call as a denied tool is refused, naming the argument.

use crate::fields::Errors;
use crate::mcp::{NameGlob, names};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One rule as written.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawArgumentRule {
    /// The tools it applies to (an exact name or a glob: `create_*`).
    pub tool: String,
    /// The argument: a top-level one (`amount`), or a path into objects (`options.force`).
    pub argument: String,
    /// String values refused (exact, or globs: `DROP *`; case-sensitive).
    #[serde(default)]
    pub deny: Vec<String>,
    /// The largest number allowed; a larger one, or a value that is not a number, is refused.
    #[serde(default)]
    pub max: Option<f64>,
    /// The smallest number allowed; a smaller one, or a value that is not a number, is refused.
    #[serde(default)]
    pub min: Option<f64>,
}

/// One rule, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgumentRule {
    pub tool: NameGlob,
    pub path: Vec<String>,
    pub deny: Vec<NameGlob>,
    pub max: Option<f64>,
    pub min: Option<f64>,
}

/// The rules at `at` (`policies[0].mcp.arguments`), checked.
pub fn validate(e: &mut Errors, at: &str, raw: &[RawArgumentRule]) -> Vec<ArgumentRule> {
    let mut out = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let tool = e.check(&format!("{at}.tool"), NameGlob::new(&r.tool));
        let path: Vec<String> = r.argument.split('.').map(str::to_owned).collect();
        if path.iter().any(String::is_empty) {
            e.fail(
                &format!("{at}.argument"),
                format!(
                    "`{}`: name an argument (`amount`) or a path into it (`options.force`)",
                    r.argument
                ),
            );
        }
        if r.deny.is_empty() && r.max.is_none() && r.min.is_none() {
            e.fail(
                &at,
                "a rule refuses something: give `deny` (strings), `max` or `min` (numbers)".into(),
            );
        }
        let deny: Vec<NameGlob> = r
            .deny
            .iter()
            .enumerate()
            .filter_map(|(j, d)| e.check(&format!("{at}.deny[{j}]"), NameGlob::new(d)))
            .collect();
        if let Some(tool) = tool {
            out.push(ArgumentRule {
                tool,
                path,
                deny,
                max: r.max,
                min: r.min,
            });
        }
    }
    out
}

/// Whether any rule applies to `tool` (its arguments are read only then).
pub fn applies(rules: &[ArgumentRule], tool: &str) -> bool {
    rules.iter().any(|r| r.tool.matches(tool))
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    params: Option<Params>,
}

#[derive(Deserialize)]
struct Params {
    #[serde(default)]
    arguments: Option<Value>,
}

/// Why the call of `tool` whose message is `body` breaks a rule, if it does.
pub fn broken(rules: &[ArgumentRule], tool: &str, body: &[u8]) -> Option<String> {
    let args = serde_json::from_slice::<Message>(body)
        .ok()?
        .params?
        .arguments
        .unwrap_or(Value::Null);
    rules.iter().filter(|r| r.tool.matches(tool)).find_map(|r| {
        let v = r.path.iter().try_fold(&args, |v, k| v.get(k))?;
        why(r, v).map(|w| format!("the argument `{}` of `{tool}` {w}", r.path.join(".")))
    })
}

/// What is wrong with `v` under `r`.
fn why(r: &ArgumentRule, v: &Value) -> Option<String> {
    if let Some(s) = v.as_str()
        && names::any(&r.deny, s)
    {
        return Some("is a value the policy refuses".into());
    }
    if r.max.is_none() && r.min.is_none() {
        return None;
    }
    let Some(n) = v.as_f64() else {
        return Some("must be a number".into());
    };
    match (r.max, r.min) {
        (Some(max), _) if n > max => Some(format!("is {n}, above {max}")),
        (_, Some(min)) if n < min => Some(format!("is {n}, below {min}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Vec<ArgumentRule> {
        let raw: Vec<RawArgumentRule> = serde_json::from_str(
            r#"[{"tool":"create_refund","argument":"amount","max":100},
                {"tool":"run_*","argument":"sql","deny":["DROP *","*; DELETE*"]},
                {"tool":"deploy","argument":"options.replicas","min":1,"max":10}]"#,
        )
        .unwrap();
        let mut e = Errors(Vec::new(), None);
        let r = validate(&mut e, "mcp.arguments", &raw);
        assert!(e.0.is_empty(), "{:?}", e.0);
        r
    }

    fn call(tool: &str, args: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#
        )
    }

    #[test]
    fn values_past_a_rule_are_refused() {
        let r = rules();
        let b = |tool: &str, args: &str| broken(&r, tool, call(tool, args).as_bytes());
        assert_eq!(b("create_refund", r#"{"amount":50}"#), None);
        assert_eq!(
            b("create_refund", r#"{"amount":250.5}"#).unwrap(),
            "the argument `amount` of `create_refund` is 250.5, above 100"
        );
        assert!(
            b("create_refund", r#"{"amount":"250"}"#)
                .unwrap()
                .contains("must be a number")
        );
        assert_eq!(
            b("create_refund", r#"{}"#),
            None,
            "an argument left out breaks no rule"
        );
        assert!(b("run_query", r#"{"sql":"DROP TABLE users"}"#).is_some());
        assert!(b("run_query", r#"{"sql":"SELECT 1; DELETE FROM x"}"#).is_some());
        assert_eq!(b("run_query", r#"{"sql":"SELECT 1"}"#), None);
        assert!(
            b("deploy", r#"{"options":{"replicas":0}}"#)
                .unwrap()
                .contains("below 1")
        );
        assert_eq!(b("deploy", r#"{"options":{"replicas":3}}"#), None);
        assert_eq!(b("other", r#"{"amount":1000}"#), None);
        assert!(applies(&r, "run_report") && !applies(&r, "list_issues"));
    }

    #[test]
    fn a_rule_must_refuse_something() {
        let raw: Vec<RawArgumentRule> =
            serde_json::from_str(r#"[{"tool":"x","argument":"a.."}]"#).unwrap();
        let mut e = Errors(Vec::new(), None);
        validate(&mut e, "mcp.arguments", &raw);
        let text = format!("{:?}", e.0);
        assert!(
            text.contains("mcp.arguments[0].argument") && text.contains("give `deny`"),
            "{text}"
        );
    }
}
