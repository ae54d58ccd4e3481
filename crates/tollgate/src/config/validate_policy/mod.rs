//! Validation of policies and of the shared limits they name: every value range-checked,
//! every reference resolved, errors at the field path with what to write.

use super::Config;
use super::raw::*;
use crate::fields::Errors;
use crate::glob::HostGlob;
use crate::policy::kind::Check;
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
            },
            spec,
        });
    }
    PolicySet::new(policies)
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
