//! `${ENV_VAR}` substitution in config strings, so secrets need not live in the file.
//!
//! `$${` writes a literal `${`. A variable that is not set is an error naming it.

/// Replaces every `${NAME}` in `text` with the value of the environment variable `NAME`.
pub fn expand(text: &str) -> Result<String, String> {
    expand_with(text, |name| std::env::var(name).ok())
}

/// [`expand`] for `check --env-optional`: a variable that is not set is passed to
/// `unset` and replaced by a placeholder (`unset-NAME`), so the rest is still checked.
pub fn expand_lenient(text: &str, mut unset: impl FnMut(&str)) -> Result<String, String> {
    let names = std::cell::RefCell::new(Vec::new());
    let out = expand_with(text, |name| {
        std::env::var(name).ok().or_else(|| {
            names.borrow_mut().push(name.to_owned());
            Some(format!("unset-{name}"))
        })
    })?;
    for n in names.into_inner() {
        unset(&n);
    }
    Ok(out)
}

fn expand_with(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    if !text.contains("${") {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("${") {
        if pos > 0 && rest.as_bytes()[pos - 1] == b'$' {
            out.push_str(&rest[..pos - 1]);
            out.push_str("${");
            rest = &rest[pos + 2..];
            continue;
        }
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated `${{` in `{text}`"))?;
        let name = &after[..end];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "`${{{name}}}` is not a valid environment variable reference"
            ));
        }
        let value =
            lookup(name).ok_or_else(|| format!(
                "environment variable `{name}` is not set (in CI without secrets, `tollgate check --env-optional` makes this a warning)"
            ))?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cret".to_owned())
    }

    #[test]
    fn substitutes_and_names_missing() {
        assert_eq!(
            expand_with("Bearer ${TOKEN}", env).unwrap(),
            "Bearer s3cret"
        );
        assert_eq!(expand_with("plain", env).unwrap(), "plain");
        assert_eq!(expand_with("$${TOKEN}", env).unwrap(), "${TOKEN}");
        let err = expand_with("${NOPE}", env).unwrap_err();
        assert!(err.contains("`NOPE`"), "{err}");
        assert!(expand_with("${TOKEN", env).is_err());
        assert!(expand_with("${A-B}", env).is_err());
    }
}
