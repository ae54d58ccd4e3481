//! Where a field path is written in the YAML text, for the errors validation finds after
//! parsing (a bad window, a route's prefix, share totals), which know their path but not
//! their line. The text is read again by a deserializer that walks down the path and
//! fails on reaching it: the YAML parser then gives that node's line and column, block
//! or flow style alike. A path validation made up (a sum over a list) is placed at its
//! nearest ancestor that is written.

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// The mark a probe fails with on reaching its node.
const HERE: &str = "tollgate-locate-here";

#[derive(Debug, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// `policies[0].rate_limit.window` as its steps; `None` for a path it cannot read.
fn steps(path: &str) -> Option<Vec<Step>> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        if !key.is_empty() {
            out.push(Step::Key(key.to_owned()));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let (n, after) = r.split_once(']')?;
            out.push(Step::Index(n.parse().ok()?));
            rest = after;
        }
        if !rest.is_empty() {
            return None;
        }
    }
    Some(out)
}

/// The line and column (1-based) where `path` is written in `text`, or where its nearest
/// written ancestor is.
pub fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    let steps = steps(path)?;
    (1..=steps.len()).rev().find_map(|n| at(text, &steps[..n]))
}

fn at(text: &str, steps: &[Step]) -> Option<(usize, usize)> {
    let de = yaml_serde::Deserializer::from_str(text);
    let err = Probe(steps).deserialize(de).err()?;
    if !err.to_string().contains(HERE) {
        return None;
    }
    err.location().map(|l| (l.line(), l.column()))
}

/// Walks to its node and fails there; `Ok` when the path is not in the text.
struct Probe<'a>(&'a [Step]);

impl<'de> DeserializeSeed<'de> for Probe<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.0.is_empty() {
            // Fails as the node is read, so the error carries its place.
            return d.deserialize_any(Fail);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        while let Some(key) = m.next_key::<String>()? {
            match &self.0[0] {
                Step::Key(k) if *k == key => m.next_value_seed(Probe(&self.0[1..]))?,
                _ => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let found = match &self.0[0] {
                Step::Index(n) if *n == i => s.next_element_seed(Probe(&self.0[1..]))?,
                _ => s.next_element::<IgnoredAny>()?.map(drop),
            };
            if found.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// Fails on whatever value it is given.
struct Fail;

impl<'de> Visitor<'de> for Fail {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(HERE)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(HERE))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(HERE))
    }
}

#[cfg(test)]
mod tests {
    use super::locate;

    const TEXT: &str = "routes:\n  - prefix: /a\n    upstream: http://x\n  - prefix: nope\n    upstream: http://y\npolicies:\n  - name: p\n    rate_limit: {limit: 5, window: fortnight}\n";

    #[test]
    fn a_path_is_found_in_block_and_flow_style() {
        assert_eq!(locate(TEXT, "routes[1].prefix"), Some((4, 13)));
        assert_eq!(locate(TEXT, "policies[0].rate_limit.window"), Some((8, 36)));
        // A path that is not written: its nearest written ancestor.
        assert_eq!(locate(TEXT, "routes[1]").map(|l| l.0), Some(4));
        assert_eq!(
            locate(TEXT, "policies[0].rate_limit.shares").map(|l| l.0),
            Some(8)
        );
        assert_eq!(locate(TEXT, "nowhere"), None);
    }
}
