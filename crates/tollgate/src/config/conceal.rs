//! What a config error quotes back of the file: a key only where it looks like one, so a
//! file that is no config at all (a password file in a config directory) is named by its
//! line, never echoed.

/// Whether `s`, quoted from the file, looks like a key a person wrote (short, printable,
/// no `$`); anything else may be a line of a file that is no config at all (a password
/// hash, a private key) and is not quoted back in errors, which reach `check`, the
/// reload's 422, the log and the dashboard.
fn looks_like_key(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_graphic() && c != '$')
}

/// The error's path and message with what the file says quoted only where it looks like
/// a key ([`looks_like_key`]); else its line is named instead.
pub(super) fn conceal(
    path: &str,
    message: &str,
    location: Option<(usize, usize)>,
) -> (String, String) {
    let at = location.map_or_else(|| "in the file".to_owned(), |(l, _)| format!("at line {l}"));
    let path = path
        .split('.')
        .map(|seg| {
            let key = seg.split('[').next().unwrap_or(seg);
            match key.is_empty() || looks_like_key(key) {
                true => seg.to_owned(),
                false => "(a key not shown)".to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(".");
    let mut message = message.to_owned();
    if let Some(rest) = message.strip_prefix("unknown field `")
        && let Some((key, tail)) = rest.split_once('`')
        && !looks_like_key(key)
    {
        message = format!(
            "unknown field {at} (not quoted: it does not look like a key — is this file a tollgate config?){tail}"
        );
    }
    if let Some(rest) = message.strip_prefix("invalid type: string \"")
        && let Some((value, tail)) = rest.rsplit_once('"')
        && !looks_like_key(value)
    {
        message = format!("invalid type: a string {at} (not quoted){tail}");
    }
    (path, message)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_what_looks_like_a_key_is_quoted_back() {
        let (path, m) = super::conceal(
            "root:$6$SALT$hash:19000:0:99999:7:::",
            "unknown field `root:$6$SALT$hash:19000:0:99999:7:::`, expected one of `listen`",
            Some((3, 1)),
        );
        assert!(!path.contains("SALT") && !m.contains("SALT"), "{path} {m}");
        assert!(
            m.contains("at line 3") && m.ends_with("expected one of `listen`"),
            "{m}"
        );
        let (path, m) = super::conceal("listen.bogus", "unknown field `bogus`, expected `a`", None);
        assert_eq!(
            (path.as_str(), m.as_str()),
            ("listen.bogus", "unknown field `bogus`, expected `a`")
        );
        assert_eq!(super::conceal(".", "m", None).0, ".");
        assert_eq!(
            super::conceal("policies[0].name", "m", None).0,
            "policies[0].name"
        );
        let (_, m) = super::conceal(
            ".",
            "invalid type: string \"root:$6$SALT\", expected `key: value` lines",
            Some((1, 1)),
        );
        assert!(!m.contains("SALT"), "{m}");
    }
}
