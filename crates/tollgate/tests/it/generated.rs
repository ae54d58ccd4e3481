//! The docs' generated tables are what the code generates now (`TOLLGATE_BLESS=1
//! cargo test -p tollgate --test it generated` rewrites them).

#[test]
fn generated_docs_are_current() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let bless = std::env::var_os("TOLLGATE_BLESS").is_some();
    let mut stale = Vec::new();
    for b in tollgate::reference::blocks() {
        let path = format!("{root}/{}", b.doc);
        let doc = std::fs::read_to_string(&path).unwrap();
        // Markdown hides its markers in comments; YAML writes them as comments.
        let (open, close) = if b.doc.ends_with(".yaml") {
            (
                format!("# generated:{}\n", b.name),
                format!("# /generated:{}", b.name),
            )
        } else {
            (
                format!("<!-- generated:{} -->\n", b.name),
                format!("<!-- /generated:{} -->", b.name),
            )
        };
        let start = doc
            .find(&open)
            .unwrap_or_else(|| panic!("{} has no `{}` marker", b.doc, open.trim()))
            + open.len();
        let end = start
            + doc[start..]
                .find(&close)
                .unwrap_or_else(|| panic!("{} has no `{close}` marker", b.doc));
        if doc[start..end] != b.text {
            if bless {
                std::fs::write(&path, format!("{}{}{}", &doc[..start], b.text, &doc[end..]))
                    .unwrap();
            } else {
                stale.push(format!("{} ({})", b.doc, b.name));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "generated tables out of date: {}; run `TOLLGATE_BLESS=1 cargo test -p tollgate --test it generated`",
        stale.join(", ")
    );
}
