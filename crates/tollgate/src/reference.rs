//! Reference tables generated from the code, so the docs cannot drift from it: the docs
//! hold each between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`, and a test
//! fails when one differs from what the code generates now (`TOLLGATE_BLESS=1` rewrites
//! them).

use crate::policy::remedies::{self, STAGES};

/// A generated block: the doc it lives in (relative to the repository root), its name,
/// and its text.
pub struct Block {
    pub doc: &'static str,
    pub name: String,
    pub text: String,
}

/// Every generated block.
pub fn blocks() -> Vec<Block> {
    vec![
        Block {
            doc: "docs/architecture.md",
            name: "stages".into(),
            text: stage_table(),
        },
        Block {
            doc: "docs/policies.md",
            name: "stages".into(),
            text: stage_table(),
        },
        Block {
            doc: "docs/policies.md",
            name: "actions".into(),
            text: action_table(),
        },
        Block {
            doc: "docs/policies.md",
            name: "remedy-metrics".into(),
            text: remedy_metrics_table(),
        },
        Block {
            doc: "docs/llm.md",
            name: "protocols".into(),
            text: crate::protocol::table(),
        },
        Block {
            doc: "docs/architecture.md",
            name: "protocols".into(),
            text: crate::protocol::table(),
        },
        Block {
            doc: "README.md",
            name: "errors".into(),
            text: error_table(),
        },
        Block {
            doc: "docs/configuration.md",
            name: "metrics-list".into(),
            text: metrics_table(),
        },
        Block {
            doc: "examples/full.yaml",
            name: "defaults".into(),
            text: defaults_yaml(),
        },
        sample_block::<crate::policy::queue::RawQueue>(
            "queues",
            "RawQueue",
            "{size: 1, max_wait: 1s}",
        ),
        Block {
            doc: "docs/configuration.md",
            ..sample_block::<crate::config::raw::RawRoute>(
                "routes",
                "RawRoute",
                "{prefix: /a, upstream: 'http://a'}",
            )
        },
        Block {
            doc: "docs/configuration.md",
            ..sample_block::<crate::config::raw_endpoints::RawEndpoint>(
                "endpoints",
                "RawEndpoint",
                "{path: /a, backends: []}",
            )
        },
        Block {
            doc: "docs/configuration.md",
            ..sample_block::<crate::config::raw_endpoints::RawBackend>(
                "backends",
                "RawBackend",
                "{url: /a}",
            )
        },
        Block {
            doc: "docs/configuration.md",
            ..sample_block::<crate::config::raw_endpoints::RawEndpointDefaults>(
                "endpoint_defaults",
                "RawEndpointDefaults",
                "{}",
            )
        },
        Block {
            doc: "docs/configuration.md",
            // The optional sinks written, so that their keys show.
            ..sample_block::<crate::config::raw_diagnosis::RawDiagnosis>(
                "diagnosis",
                "RawDiagnosis",
                "{har: {file: {dir: a}, collector: {url: a}}}",
            )
        },
    ]
    .into_iter()
    .chain(remedies::STAGES.iter().map(key_block))
    .chain([Block {
        doc: "examples/full.yaml",
        name: "policies".into(),
        text: policies_yaml(),
    }])
    .chain(SECTIONS.iter().map(|s| Block {
        doc: "docs/configuration.md",
        name: s.to_string(),
        text: section_table(s),
    }))
    .collect()
}

/// A remedy's key table in policies.md: the keys its example shows (every default
/// filled in), in the order its raw type declares them, each with its default and doc
/// from the schema. A remedy whose definitions are declared shows the definition's keys.
fn key_block(stage: &crate::policy::kind::Stage) -> Block {
    let schema = schema();
    let example = match stage.declares {
        // The first declared entry: the example in the policy is only its name.
        Some((_, declared)) => declared().map(|d| {
            d.as_mapping()
                .and_then(|m| m.values().next().cloned())
                .unwrap_or_default()
        }),
        None => (stage.example)(),
    };
    let def = definition(
        &schema,
        &schema["$defs"]["RawPolicy"]["properties"][stage.key],
    );
    let mut text = String::from("| key | default | meaning |\n|---|---|---|\n");
    rows(&schema, def, &example.unwrap_or_default(), "", &mut text);
    Block {
        doc: "docs/policies.md",
        name: format!("keys:{}", stage.key),
        text,
    }
}

/// The policy half of `examples/full.yaml`: each declared section's example, and one
/// policy applying every remedy as its example writes it, every default filled in.
pub fn policies_yaml() -> String {
    let mut out = yaml_serde::Mapping::new();
    let mut policy = yaml_serde::Mapping::new();
    policy.insert("name".into(), "every-remedy".into());
    let matcher = "{host: api.github.com, path: '/users/{user}/*', methods: [GET]}";
    policy.insert(
        "match".into(),
        yaml_serde::from_str(matcher).unwrap_or_default(),
    );
    for s in remedies::STAGES {
        if let Some((section, declared)) = s.declares {
            out.insert(section.into(), declared().unwrap_or_default());
        }
        policy.insert(s.key.into(), (s.example)().unwrap_or_default());
    }
    // A policy per MCP tool: what `match.mcp` names.
    let per_tool = "{name: mcp-writes, match: {host: api.githubcopilot.com, mcp: {methods: [tools/call], tools: ['create_*'], names: []}}, mcp: {deny: [delete_repository]}}";
    out.insert(
        "policies".into(),
        yaml_serde::Value::Sequence(vec![
            yaml_serde::Value::Mapping(policy),
            yaml_serde::from_str(per_tool).unwrap_or_default(),
        ]),
    );
    yaml_serde::to_string(&out).unwrap_or_default()
}

/// A key table of a type with required keys: read from `sample` (the required keys
/// with any value), which fills in the defaults; a required key's default says so.
fn sample_block<T: serde::Serialize + serde::de::DeserializeOwned>(
    key: &str,
    def: &str,
    sample: &str,
) -> Block {
    let value = yaml_serde::from_str::<T>(sample).and_then(yaml_serde::to_value);
    table_block(key, def, value)
}

fn table_block(
    key: &str,
    def: &str,
    defaults: Result<yaml_serde::Value, yaml_serde::Error>,
) -> Block {
    let schema = schema();
    let defaults = defaults.unwrap_or(yaml_serde::Value::Null);
    let mut text = String::from("| key | default | meaning |\n|---|---|---|\n");
    rows(&schema, &schema["$defs"][def], &defaults, "", &mut text);
    Block {
        doc: "docs/policies.md",
        name: format!("keys:{key}"),
        text,
    }
}

/// The config's JSON schema, whose descriptions are the raw types' doc comments.
fn schema() -> serde_json::Value {
    serde_json::from_str(&crate::config::json_schema()).unwrap_or_default()
}

/// The sections of the file whose tables configuration.md shows generated.
const SECTIONS: [&str; 10] = [
    "listen",
    "admin",
    "upstream",
    "domains",
    "egress",
    "intercept",
    "store",
    "metrics",
    "log",
    "shutdown",
];

/// A section's keys (`upstream`: `connect_timeout`, …, `pool.idle_timeout`), in the
/// order the raw type declares them, each with its default and its doc comment.
pub fn section_table(section: &str) -> String {
    let schema = schema();
    // The defaults as YAML: a mapping keeps the order the fields are declared in.
    let defaults = yaml_serde::to_value(crate::config::raw::RawConfig::default())
        .unwrap_or(yaml_serde::Value::Null);
    let mut out = String::from("| key | default | meaning |\n|---|---|---|\n");
    let def = definition(&schema, &schema["properties"][section]);
    rows(&schema, def, &defaults[section], "", &mut out);
    out
}

/// The rows of the keys `example` shows (in the order its type declares them), each
/// with its default and doc from the schema (an example's own values are not defaults).
fn rows(
    schema: &serde_json::Value,
    def: &serde_json::Value,
    example: &yaml_serde::Value,
    prefix: &str,
    out: &mut String,
) {
    let Some(map) = example.as_mapping() else {
        return;
    };
    for (k, v) in map {
        let Some(key) = k.as_str() else { continue };
        let field = &def["properties"][key];
        let inner = definition(schema, field);
        // A queue has a key table of its own (`keys:queues`): one row here.
        let own_table = std::ptr::eq(inner, &schema["$defs"]["RawQueue"]);
        if v.is_mapping() && inner.get("properties").is_some() && !own_table {
            rows(schema, inner, v, &format!("{prefix}{key}."), out);
            continue;
        }
        let required = def["required"]
            .as_array()
            .is_some_and(|r| r.iter().any(|k| k == key));
        let default = match field.get("default") {
            _ if required => "required".to_owned(),
            None | Some(serde_json::Value::Null) => "none".to_owned(),
            // Through text: serde_json's numbers keep their spelling (arbitrary precision).
            Some(d) => format!(
                "`{}`",
                plain(&yaml_serde::from_str(&d.to_string()).unwrap_or_default())
            ),
        };
        let doc = field["description"]
            .as_str()
            .unwrap_or_default()
            .replace('\n', " ");
        out.push_str(&format!("| `{prefix}{key}` | {default} | {doc} |\n"));
    }
}

/// A default as a user writes it: `60s`, `[GET, HEAD]`, `{}`.
fn plain(v: &yaml_serde::Value) -> String {
    match v {
        yaml_serde::Value::String(s) => s.clone(),
        yaml_serde::Value::Sequence(items) => {
            format!(
                "[{}]",
                items.iter().map(plain).collect::<Vec<_>>().join(", ")
            )
        }
        other => serde_json::to_string(other)
            .unwrap_or_default()
            .replace('"', ""),
    }
}

/// Follows `$ref`s and `anyOf`s (an optional key, a short form beside the mapping) to
/// the definition with the fields.
fn definition<'a>(
    schema: &'a serde_json::Value,
    mut at: &'a serde_json::Value,
) -> &'a serde_json::Value {
    for _ in 0..8 {
        if at.get("properties").is_some() {
            break;
        }
        at = match (at.get("$ref"), at.get("anyOf")) {
            (Some(r), _) => {
                &schema["$defs"][r
                    .as_str()
                    .unwrap_or_default()
                    .trim_start_matches("#/$defs/")]
            }
            (None, Some(any)) => any
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .find(|v| v.get("$ref").is_some() || v.get("properties").is_some())
                })
                .unwrap_or(&serde_json::Value::Null),
            _ => break,
        };
    }
    at
}

/// The sections that have defaults, as YAML with every key at its default: the top of
/// `examples/full.yaml`. Diagnosis is read from a sample naming its optional sinks, so
/// that their keys show too.
pub fn defaults_yaml() -> String {
    let all = yaml_serde::to_value(crate::config::raw::RawConfig::default())
        .unwrap_or(yaml_serde::Value::Null);
    let sinks = "{har: {file: {dir: har}, collector: {url: 'http://127.0.0.1:9411/har'}}}";
    let diagnosis = yaml_serde::from_str::<crate::config::raw_diagnosis::RawDiagnosis>(sinks)
        .and_then(yaml_serde::to_value)
        .unwrap_or(yaml_serde::Value::Null);
    // The CA files have no default (absent: the data directory's); shown with example paths.
    let ca = "{ca: {cert_file: /etc/tollgate/tollgate-ca.pem, key_file: /etc/tollgate/tollgate-ca-key.pem}}";
    let intercept = yaml_serde::from_str::<crate::config::raw::RawIntercept>(ca)
        .and_then(yaml_serde::to_value)
        .unwrap_or(yaml_serde::Value::Null);
    // Sentinel has no default either (used with `backend: redis` instead of `url`).
    let sentinel = "{sentinel: {nodes: ['redis://sentinel-1:26379'], master: mymaster}}";
    let store = yaml_serde::from_str::<crate::config::raw::RawStore>(sentinel)
        .and_then(yaml_serde::to_value)
        .unwrap_or(yaml_serde::Value::Null);
    let mut out = yaml_serde::Mapping::new();
    for section in SECTIONS.iter().chain(&["diagnosis"]) {
        let value = match *section {
            "diagnosis" => diagnosis.clone(),
            "intercept" => intercept.clone(),
            "store" => store.clone(),
            s => all[s].clone(),
        };
        out.insert((*section).into(), value);
    }
    yaml_serde::to_string(&out).unwrap_or_default()
}

/// Every metric `GET /metrics` serves: its name as scraped, type, labels and help, read
/// from the registry itself.
pub fn metrics_table() -> String {
    let text = crate::metrics::Metrics::described(crate::policy::register_metrics);
    let mut out = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for f in families(&text) {
        out.push_str(&format!("| {} |\n", f.join(" | ")));
    }
    out
}

/// The metric families each remedy registers (beside `tollgate_remedy_actions_total`,
/// which counts every remedy's actions): the table in policies.md, so that a new remedy's
/// metric shows there as soon as its module registers it.
pub fn remedy_metrics_table() -> String {
    let base: Vec<String> = families(&crate::metrics::Metrics::described(|_| {}))
        .into_iter()
        .map(|f| f[0].clone())
        .collect();
    let mut out =
        String::from("| remedy | metric | type | labels | meaning |\n|---|---|---|---|---|\n");
    for stage in STAGES {
        let text = crate::metrics::Metrics::described(|m| (stage.register)(m));
        for f in families(&text)
            .into_iter()
            .filter(|f| !base.contains(&f[0]))
        {
            out.push_str(&format!("| `{}` | {} |\n", stage.key, f.join(" | ")));
        }
    }
    out
}

/// The families of a `/metrics` text in the order written: the name as scraped (a
/// counter's with `_total`), the type, the label names and the help, as table cells.
fn families(text: &str) -> Vec<[String; 4]> {
    let mut out = Vec::new();
    let mut help = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').map_or("", |(_, h)| h);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let Some((name, kind)) = rest.split_once(' ') else {
                continue;
            };
            let scraped = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            };
            // The first sample of the family carries its label names.
            let labels: Vec<String> = text
                .lines()
                .find(|l| !l.starts_with('#') && l.starts_with(name))
                .and_then(|l| Some(l.split_once('{')?.1.split_once('}')?.0))
                .map(|set| {
                    set.split(',')
                        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
                        .filter(|k| *k != "le")
                        .map(|k| format!("`{k}`"))
                        .collect()
                })
                .unwrap_or_default();
            out.push([
                format!("`{scraped}`"),
                kind.to_owned(),
                labels.join(" "),
                help.to_owned(),
            ]);
        }
    }
    out
}

/// Every error tollgate makes up: when, its status and `x-tollgate-error` code, one row
/// per code (situations that share one are joined).
pub fn error_table() -> String {
    let mut rows: Vec<(u16, &str, Vec<&str>)> = Vec::new();
    let mut refusals: Vec<crate::error::Reject> = Vec::new();
    for r in remedies::STAGES.iter().flat_map(|s| s.refusals) {
        if !refusals.iter().any(|k| k.code == r.code) {
            refusals.push(r);
        }
    }
    for k in crate::error::catalogue(&refusals) {
        let (status, code) = (k.status.as_u16(), k.code);
        match rows.iter_mut().find(|r| r.1 == code && r.0 == status) {
            Some(r) => r.2.push(k.situation),
            None => rows.push((status, code, vec![k.situation])),
        }
    }
    let mut out = String::from("| situation | status | code |\n|---|---|---|\n");
    for (status, code, situations) in rows {
        out.push_str(&format!(
            "| {} | {status} | `{code}` |\n",
            situations.join("; ")
        ));
    }
    out
}

/// Each remedy's actions, as `tollgate_remedy_actions_total` counts them.
pub fn action_table() -> String {
    let mut out = String::from("| remedy | actions |\n|---|---|\n");
    for s in STAGES {
        let (_, actions) = (s.actions)();
        if !actions.is_empty() {
            let list: Vec<_> = actions.iter().map(|a| format!("`{a}`")).collect();
            out.push_str(&format!("| `{}` | {} |\n", s.name, list.join(", ")));
        }
    }
    out
}

/// The chain's stages in order ([`STAGES`], the registry), with what each does per phase.
pub fn stage_table() -> String {
    let mut out = String::from(
        "| # | policy key | remedy | request phase | each attempt | response phase (reverse order) |\n|---|---|---|---|---|---|\n",
    );
    for (i, s) in STAGES.iter().enumerate() {
        let crate::policy::kind::Phases {
            request,
            attempt,
            response,
        } = s.phases;
        out.push_str(&format!(
            "| {} | `{}` | `{}` | {request} | {attempt} | {response} |\n",
            i + 1,
            s.key,
            s.name
        ));
    }
    out
}
