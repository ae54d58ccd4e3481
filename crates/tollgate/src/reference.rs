//! Reference tables generated from the code, so the docs cannot drift from it: the docs
//! hold each between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`, and a test
//! fails when one differs from what the code generates now (`TOLLGATE_BLESS=1` rewrites
//! them).

use crate::policy::registry::STAGES;

/// A generated block: the doc it lives in (relative to the repository root), its name,
/// and its text.
pub struct Block {
    pub doc: &'static str,
    pub name: &'static str,
    pub text: String,
}

/// Every generated block.
pub fn blocks() -> Vec<Block> {
    vec![
        Block {
            doc: "docs/architecture.md",
            name: "stages",
            text: stage_table(),
        },
        Block {
            doc: "docs/policies.md",
            name: "stages",
            text: stage_table(),
        },
    ]
}

/// The chain's stages in order ([`STAGES`], the registry), with what each does per phase.
pub fn stage_table() -> String {
    let mut out = String::from(
        "| # | policy key | remedy | request phase | each attempt | response phase (reverse order) |\n|---|---|---|---|---|---|\n",
    );
    for (i, s) in STAGES.iter().enumerate() {
        let [request, attempt, response] = s.phases;
        out.push_str(&format!(
            "| {} | `{}` | `{}` | {request} | {attempt} | {response} |\n",
            i + 1,
            s.key,
            s.name
        ));
    }
    out
}
