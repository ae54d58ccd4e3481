//! A test's config, built key by key instead of written as escaped YAML: each value in
//! YAML's flow style, on one line (`{attempts: 3, base_delay: 1ms}`).

/// A config being built; [`Config::yaml`] gives the file's text.
#[derive(Default)]
pub struct Config {
    sections: Vec<(String, String)>,
    policies: Vec<String>,
}

/// An empty config: everything at its default.
pub fn config() -> Config {
    Config::default()
}

impl Config {
    /// A top-level section: `.section("breakers", "{b: {consecutive_failures: 3}}")`.
    pub fn section(mut self, key: &str, flow: &str) -> Self {
        self.sections.push((key.to_owned(), flow.to_owned()));
        self
    }

    /// A policy named `name` matching `matcher` (`{host: api.example.com}`), applying
    /// each remedy of `remedies` (its key and its value).
    pub fn policy(mut self, name: &str, matcher: &str, remedies: &[(&str, &str)]) -> Self {
        let mut p = format!("  - name: {name}\n    match: {matcher}\n");
        for (key, flow) in remedies {
            p.push_str(&format!("    {key}: {flow}\n"));
        }
        self.policies.push(p);
        self
    }

    /// The policy most tests need: `p`, applying `remedies` to every call of a local
    /// upstream (`127.0.0.1`).
    pub fn local_policy(self, remedies: &[(&str, &str)]) -> Self {
        self.policy("p", "{host: 127.0.0.1}", remedies)
    }

    /// The config's YAML text.
    pub fn yaml(&self) -> String {
        let mut out = String::new();
        for (key, flow) in &self.sections {
            out.push_str(&format!("{key}: {flow}\n"));
        }
        if !self.policies.is_empty() {
            out.push_str("policies:\n");
            self.policies.iter().for_each(|p| out.push_str(p));
        }
        out
    }
}
