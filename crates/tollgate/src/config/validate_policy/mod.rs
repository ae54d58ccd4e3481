//! Validation of policies and of the shared limits they name: every value range-checked,
//! every reference resolved, errors at the field path with what to write.

use super::Config;
use super::raw::*;
use crate::fields::Errors;
use crate::glob::HostGlob;
use crate::mcp::NameGlob;
use crate::policy::kind::Check;
use crate::policy::matcher::{McpMatch, RawMcpMatch};
use crate::policy::remedies::{Declared, PolicySpec};
use crate::policy::{Matcher, PathTemplate, Policy, PolicySet};
use serde_json::{Value, json};

pub(super) fn policies(e: &mut Errors, raw: &RawConfig) -> PolicySet {
    let declared = Declared::validate(e, raw.declared());

    let mut policies = Vec::new();
    for (i, p) in raw.policies.iter().enumerate() {
        let at = |f: &str| format!("policies[{i}].{f}");
        if p.name.trim().is_empty() {
            e.fail(&at("name"), "must not be empty".into());
        }
        if policies.iter().any(|o: &Policy| o.name == p.name) {
            e.fail(
                &at("name"),
                format!("policy name `{}` is used twice", p.name),
            );
        }
        let host = p
            .matcher
            .host
            .as_deref()
            .and_then(|h| e.check(&at("match.host"), HostGlob::new(h)));
        let path = p
            .matcher
            .path
            .as_deref()
            .and_then(|t| e.check(&at("match.path"), PathTemplate::new(t)));
        let methods = e.methods(&at("match.methods"), &p.matcher.methods);
        let mcp = p
            .matcher
            .mcp
            .as_ref()
            .map(|m| mcp_match(e, &at("match.mcp"), m));
        let spec = PolicySpec::validate(
            p,
            &format!("policies[{i}]"),
            Check {
                errors: e,
                path: String::new(),
                policy: &p.name,
                template: path.as_ref(),
                declared: &declared,
            },
        );
        policies.push(Policy {
            name: p.name.clone(),
            matcher: Matcher {
                host,
                path,
                methods,
                mcp,
            },
            spec,
        });
    }
    PolicySet::new(policies)
}

/// `match.mcp`, checked: names non-empty, a tool with `tools/call` among the methods.
fn mcp_match(e: &mut Errors, at: &str, m: &RawMcpMatch) -> McpMatch {
    let globs = |e: &mut Errors, key: &str, list: &[String]| -> Vec<NameGlob> {
        list.iter()
            .enumerate()
            .filter_map(|(i, n)| e.check(&format!("{at}.{key}[{i}]"), NameGlob::new(n)))
            .collect()
    };
    for (i, method) in m.methods.iter().enumerate() {
        if method.is_empty() || method.len() > crate::mcp::envelope::MAX_METHOD {
            e.fail(
                &format!("{at}.methods[{i}]"),
                "write a JSON-RPC method, e.g. `tools/call`".into(),
            );
        }
    }
    if !m.tools.is_empty() && !m.methods.is_empty() && !m.methods.iter().any(|x| x == "tools/call")
    {
        e.fail(
            &format!("{at}.tools"),
            "tools are named only by `tools/call`: add it to `methods`, or leave `methods` out"
                .into(),
        );
    }
    McpMatch {
        methods: m.methods.clone(),
        tools: globs(e, "tools", &m.tools),
        names: globs(e, "names", &m.names),
    }
}

/// The policies as `/config` shows them (secrets masked).
pub(super) fn effective(c: &Config) -> Value {
    // Every key as written (defaults filled in, shared definitions resolved, secrets
    // masked), and the chain the policy compiled to.
    let written = c.written["policies"].as_array();
    json!(
        c.policies
            .policies
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut v = written
                    .and_then(|w| w.get(i))
                    .cloned()
                    .unwrap_or_else(|| json!({"name": p.name}));
                v["remedies"] = json!(p.spec.remedies());
                v
            })
            .collect::<Vec<_>>()
    )
}
